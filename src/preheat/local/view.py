"""What ``preheat up`` shows: a rich live view in a terminal, structured logs otherwise.

The live view, top to bottom: the pool line (desired active + standby, workers by state,
the metric source), traffic over the autoscaling window (requests/s, outcomes, prefix-cache
hit rate, client-facing TTFT p50/p95/p99 at the router), the autoscaler's signals against
their objectives and its last reason, the workers table (state, pid, load), and the latest
scaling events with their reasons. :class:`LogView` writes the events as they happen and
one ``pool_status`` line per ``every_s`` instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from preheat.local.runtime import EventLine, PoolSnapshot, describe_counts
from preheat.process.logs import fields

log = logging.getLogger("preheat.local")

STATE_STYLES = {
    "active": "bold green",
    "standby": "cyan",
    "starting": "yellow",
    "loading": "yellow",
    "warming": "yellow",
    "draining": "magenta",
    "stopped": "dim",
    "unreachable": "bold red",
}
EVENT_STYLES = {
    "scale_up": "bold green",
    "scale_down": "bold magenta",
    "promote": "green",
    "demote": "cyan",
    "crash": "bold red",
    "restart": "red",
    "drain": "magenta",
}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def render(s: PoolSnapshot) -> Group:
    """The whole view for one snapshot (pure: testable without a terminal)."""
    c = s.counts
    head = Text.assemble(
        (f"pool {s.pool}", "bold"),
        f"  engine {s.engine}  up {s.t_s:,.0f} s  router grpc {s.router}  http {s.router_http}",
    )
    wanted = Text.assemble(
        "want ",
        (f"{s.desired} active", "bold green"),
        f" + {s.standby_wanted} standby   have ",
        (f"{c.active} active", STATE_STYLES["active"]),
        ", ",
        (f"{c.standby} standby", STATE_STYLES["standby"]),
        ", ",
        (f"{c.warming} starting", STATE_STYLES["starting"]),
        ", ",
        (f"{c.draining} draining", STATE_STYLES["draining"]),
        f"   metrics: {s.source}",
    )
    t = s.traffic
    p50, p95, p99 = t.ttft_ms
    hit = "-" if t.cache_hit_rate is None else f"{t.cache_hit_rate * 100:.0f}%"
    outcomes = ", ".join(f"{k} {v:.0f}" for k, v in sorted(t.outcomes.items()) if v) or "none"
    traffic = Text(
        f"last {t.window_s:g} s: {t.rate:.1f} req/s ({outcomes})   cache hit {hit}   "
        f"TTFT p50 {_ms(p50)}  p95 {_ms(p95)}  p99 {_ms(p99)}"
    )
    auto = Text(f"autoscaler: {s.signals or 'no objectives'}\n  {s.decision or '-'}", style="dim")

    table = Table(expand=True, show_edge=False, pad_edge=False)
    for col in ("worker", "state", "pid", "in flight", "running", "waiting", "KV", "restarts"):
        table.add_column(col, justify="left" if col in ("worker", "state") else "right")
    for w in s.workers:
        table.add_row(
            w["name"],
            Text(w["state"], style=STATE_STYLES.get(w["state"], "")),
            str(w["pid"]),
            str(w["in_flight"]),
            str(w["running"]),
            str(w["waiting"]),
            f"{w['kv'] * 100:.0f}%",
            str(w["restarts"]),
        )

    events = Table(expand=True, show_edge=False, pad_edge=False, show_header=False)
    events.add_column("t", justify="right", width=7)
    events.add_column("kind", width=10)
    events.add_column("worker", width=8)
    events.add_column("reason", ratio=1, overflow="fold")
    for e in list(s.events)[-8:]:
        events.add_row(
            f"{e.t_s:,.1f}s",
            Text(e.kind, style=EVENT_STYLES.get(e.kind, "")),
            e.worker,
            e.reason,
        )
    foot = Text(
        "stopping: draining workers..." if s.stopping else f"Ctrl-C drains and stops; run {s.out}",
        style="bold yellow" if s.stopping else "dim",
    )
    return Group(
        Panel(Group(head, wanted, traffic, auto), title="preheat up", border_style="blue"),
        table,
        Panel(events, title="scaling events", border_style="dim"),
        foot,
    )


class LiveView:
    """A rich ``Live`` display, refreshed at each tick; several pools (one router in front
    of them) are shown one under the other, in the order they first reported."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._live: Live | None = None
        self._pools: dict[str, PoolSnapshot] = {}

    def __enter__(self) -> LiveView:
        self._live = Live(console=self.console, refresh_per_second=4, transient=False)
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def update(self, snapshot: PoolSnapshot) -> None:
        self._pools[snapshot.pool] = snapshot
        if self._live is not None:
            views = [render(s) for s in self._pools.values()]
            self._live.update(views[0] if len(views) == 1 else Group(*views))

    def event(self, line: EventLine) -> None:
        return None


class LogView:
    """Structured log lines: every event, and a ``pool_status`` line every ``every_s``."""

    def __init__(self, every_s: float = 5.0, clock: Any = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._next: dict[str, float] = {}  # by pool: several may share the view

    def __enter__(self) -> LogView:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, s: PoolSnapshot) -> None:
        now = self.clock()
        if now < self._next.get(s.pool, 0.0) and not s.stopping:
            return
        self._next[s.pool] = now + self.every_s
        t = s.traffic
        log.info(
            "pool_status",
            extra=fields(
                pool=s.pool,
                t_s=s.t_s,
                desired=s.desired,
                replicas=describe_counts(s.counts),
                rate=round(t.rate, 2),
                ttft_p50_ms=_round(t.ttft_ms[0]),
                ttft_p95_ms=_round(t.ttft_ms[1]),
                ttft_p99_ms=_round(t.ttft_ms[2]),
                cache_hit=None if t.cache_hit_rate is None else round(t.cache_hit_rate, 3),
                signals=s.signals,
                router=s.router,
            ),
        )

    def event(self, line: EventLine) -> None:
        log.info(
            "pool_event",
            extra=fields(
                pool=line.pool,
                t_s=line.t_s,
                kind=line.kind,
                worker=line.worker,
                reason=line.reason,
            ),
        )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


__all__ = ["LiveView", "LogView", "render"]
