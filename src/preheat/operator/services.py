"""What the kopf handlers share through ``memo``, built once from the options: the reconcile
service and the autoscaler (``preheat operator``'s ``serve``, or the startup handler under
``kopf run``)."""

from __future__ import annotations

from preheat.operator.autoscaling import Autoscaler
from preheat.operator.kube import Kube
from preheat.operator.metrics import AutoscalerMetrics, Metrics
from preheat.operator.options import OperatorOptions
from preheat.operator.reconciler import Reconciler


def services(
    options: OperatorOptions, kube: Kube, metrics: Metrics | None = None
) -> tuple[Reconciler, Autoscaler]:
    """The reconcile service and the autoscaler the handlers share (``memo``)."""
    reconciler = Reconciler(
        kube=kube,
        build=options.build,
        metrics=metrics or Metrics(),
        cache_token=options.cache_token,
        worker_timeout_s=options.worker_timeout_s,
    )
    autoscaler = Autoscaler(options.autoscaler, AutoscalerMetrics(reconciler.metrics.registry))
    return reconciler, autoscaler


__all__ = ["services"]
