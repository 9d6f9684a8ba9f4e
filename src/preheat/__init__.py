"""Preheat: warm GPU inference pools on Kubernetes, routed by predicted time to first token."""

__version__ = "0.1.0"
