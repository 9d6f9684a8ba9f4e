"""Shared by the `preheat up` integration tests: the small autoscaled sim pool they run."""

from __future__ import annotations

from typing import Any


class NullView:
    """A view that shows nothing (for a :class:`LocalPool` run in-process)."""

    def update(self, snapshot: Any) -> None:
        pass

    def event(self, line: Any) -> None:
        pass


def autoscaled_pool(name: str) -> str:
    """InferencePool YAML: sim workers 10x slower than an H100 with quick start-up, 1-3
    active with one warm standby, scaled on TTFT p95 <= 1.5 s over 5 s with 2 s windows."""
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {name}}}
spec:
  model: {{name: sim-8b}}
  engine:
    kind: sim
    args: {{timeScale: 10, loadTime: 300ms, warmupTime: 200ms}}
  replicas: {{min: 1, max: 3, warmStandby: 1}}
  autoscaling:
    objectives:
      - {{signal: ttft, percentile: 95, targetMs: 1500}}
    window: 5s
    scaleUp: {{stabilization: 0s, cooldown: 2s, maxStep: 2}}
    scaleDown: {{stabilization: 2s, cooldown: 2s, maxStep: 3}}
"""
