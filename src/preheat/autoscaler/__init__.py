"""The autoscaler's I/O side: metric sources feeding :func:`preheat.core.autoscaling.decide`."""
