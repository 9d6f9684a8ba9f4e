"""The report as plain text: :func:`render_table` (one run) and :func:`render_comparison`
(several runs side by side, e.g. the simulator's sweep)."""

from __future__ import annotations

from collections.abc import Sequence

from preheat.report.budget import render_budget
from preheat.report.summary import REPLICA_STATES, SCALING_KINDS, Quantiles, RunSummary

MAX_ENDPOINT_ROWS = 16


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _quantile_row(label: str, q: Quantiles) -> str:
    return (
        f"  {label:<18} {q.count:>7} {_ms(q.p50):>9} {_ms(q.p95):>9} {_ms(q.p99):>9}"
        f" {_ms(q.mean):>9}"
    )


def title(s: RunSummary) -> str:
    """``SIMULATED`` leads the title of a simulated run, so no one mistakes it for a live one."""
    return f"{'SIMULATED run' if s.simulated else 'Run'} {s.name}"


def render_table(s: RunSummary) -> str:
    """The whole report of one run as aligned plain text."""
    lines = [title(s)]
    where = f"target {s.target}, " if s.target else ""
    lines.append(f"  {where}{s.duration_s:.1f} s")
    lines.append("")
    lines.append(
        f"requests {s.requests}: ok {s.ok}, rejected {s.rejected} (admission: 429 / "
        f"RESOURCE_EXHAUSTED), error {s.error}"
    )
    lg = s.load_generator
    if "sent" in lg:
        client = (
            f"  load generator: {lg.get('sent', 0)} sent, {lg.get('dropped', 0)} dropped at its "
            f"concurrency cap, {lg.get('late', 0)} late (max lag {lg.get('max_lag_ms', 0):.0f} ms)"
        )
        if lg.get("not_sent"):
            client += f", {lg['not_sent']} not sent (stopped)"
        lines.append(client)
    elif "failed" in lg:
        lines.append(f"  load generator failed: {lg['failed']}")
    if s.errors_by_message:
        kinds = ", ".join(f"{msg} x{n}" for msg, n in s.errors_by_message.items())
        lines.append(f"  errors: {kinds}")
    lines.append("")
    lines.append(f"  {'ms':<18} {'n':>7} {'p50':>9} {'p95':>9} {'p99':>9} {'mean':>9}")
    lines.append(_quantile_row("TTFT", s.ttft_ms))
    lines.append(_quantile_row("ITL", s.itl_ms))
    lines.append(_quantile_row("e2e", s.e2e_ms))
    if s.stages_ms:
        lines.append("  stages (server-reported; outside_engine = client TTFT - engine TTFT):")
        for stage, q in s.stages_ms.items():
            lines.append(_quantile_row("  " + stage, q))
    if s.budget is not None:
        lines.extend(render_budget(s.budget))
    lines.append("")
    if s.slo_attainment is None:
        lines.append("SLO attainment: - (the run has no objective)")
    else:
        parts = []
        if s.ttft_objective_ms > 0:
            parts.append(f"TTFT <= {s.ttft_objective_ms:g} ms {_pct(s.ttft_attainment)}")
        if s.e2e_objective_ms > 0:
            parts.append(f"e2e <= {s.e2e_objective_ms:g} ms {_pct(s.e2e_attainment)}")
        both = f"; both {_pct(s.slo_attainment)}" if len(parts) > 1 else ""
        lines.append(
            f"SLO attainment (rejected and failed count as misses): {'; '.join(parts)}{both}"
        )
    lines.append(
        f"cache hit rate: {_pct(s.cache_hit_rate)} ({s.cached_tokens} cached of "
        f"{s.prompt_tokens} prompt tokens)"
    )
    if s.output_tokens_per_s is not None:
        lines.append(f"output: {s.output_tokens} tokens, {s.output_tokens_per_s:.1f} tokens/s")
    if s.by_class:
        lines.append("")
        lines.append(
            f"  {'class':<18} {'requests':>8} {'ok':>7} {'rejected':>8} {'error':>7}"
            f" {'TTFT p50':>9} {'p95':>9} {'p99':>9} {'target':>9} {'TTFT SLO':>9}"
        )
        for name, c in s.by_class.items():
            target = _ms(c.ttft_objective_ms) if c.ttft_objective_ms > 0 else "-"
            lines.append(
                f"  {(name or '(default)')[:18]:<18} {c.requests:>8} {c.ok:>7} {c.rejected:>8}"
                f" {c.error:>7} {_ms(c.ttft_ms.p50):>9} {_ms(c.ttft_ms.p95):>9}"
                f" {_ms(c.ttft_ms.p99):>9} {target:>9} {_pct(c.ttft_attainment):>9}"
            )
    if s.by_endpoint:
        lines.append("")
        lines.append(f"  {'endpoint':<18} {'ok':>7} {'TTFT p50':>9} {'p95':>9} {'hit':>9}")
        shown = list(s.by_endpoint.items())
        for name, e in shown[:MAX_ENDPOINT_ROWS]:
            lines.append(
                f"  {name[:18]:<18} {e.requests:>7} {_ms(e.ttft_ms.p50):>9}"
                f" {_ms(e.ttft_ms.p95):>9} {_pct(e.cache_hit_rate):>9}"
            )
        if len(shown) > MAX_ENDPOINT_ROWS:
            lines.append(f"  ... and {len(shown) - MAX_ENDPOINT_ROWS} more endpoints")
        lines.append("")
    total = sum(s.replica_seconds.values())
    if total > 0:
        per = ", ".join(f"{st} {s.replica_seconds.get(st, 0.0):.1f}" for st in REPLICA_STATES)
        lines.append(f"replica-seconds: {total:.1f} ({per}); peak {s.peak_replicas} replicas")
    else:
        lines.append("replica-seconds: - (no replica samples in this run)")
    scaling = ", ".join(f"{k} {s.events_by_kind.get(k, 0)}" for k in SCALING_KINDS)
    others = ", ".join(f"{k} {n}" for k, n in s.events_by_kind.items() if k not in SCALING_KINDS)
    lines.append(
        f"scaling events: {s.scaling_events} ({scaling})" + (f"; other: {others}" if others else "")
    )
    return "\n".join(lines)


def render_comparison(summaries: Sequence[RunSummary], labels: Sequence[str]) -> str:
    """One line per run: the headline figures side by side (for sweeps)."""
    head = (
        f"{'run':<24} {'req':>6} {'rej':>5} {'err':>5} {'TTFT p50':>9} {'p95':>8} {'p99':>8}"
        f" {'ITL p99':>8} {'SLO':>7} {'hit':>7} {'rep-s':>9} {'scale':>5}"
    )
    rows = [head, "-" * len(head)]
    for label, s in zip(labels, summaries, strict=True):
        rows.append(
            f"{label[:24]:<24} {s.requests:>6} {s.rejected:>5} {s.error:>5}"
            f" {_ms(s.ttft_ms.p50):>9} {_ms(s.ttft_ms.p95):>8} {_ms(s.ttft_ms.p99):>8}"
            f" {_ms(s.itl_ms.p99):>8} {_pct(s.slo_attainment):>7} {_pct(s.cache_hit_rate):>7}"
            f" {sum(s.replica_seconds.values()):>9.1f} {s.scaling_events:>5}"
        )
    return "\n".join(rows)
