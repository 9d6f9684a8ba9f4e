"""``preheat up``: a whole InferencePool on one machine (workers and a router as local
processes), driven by the same reconcile and autoscaling code as the operator."""
