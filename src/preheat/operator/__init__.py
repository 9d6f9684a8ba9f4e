"""``preheat operator``: a kopf operator that reconciles ``InferencePool`` resources.

- :mod:`preheat.operator.handlers`: thin kopf handlers (level-based reconcile).
- :mod:`preheat.operator.kube`: the one module that talks to the Kubernetes API.
- :mod:`preheat.operator.status`: pure status and conditions from observed pods.
- :mod:`preheat.operator.main`: flags, config file, health/metrics server, ``run``.
"""
