"""Prometheus text exposition -> typed model-server stats and histogram buckets. Pure.

The router scrapes each model server's ``/metrics`` and needs three gauges (the
model-server metric contract of the Gateway API Inference Extension): waiting requests,
running requests and KV-cache usage. Their names are configurable
(:class:`ModelServerMetricNames`, vLLM's by default). A metric that is absent reads as
``None`` ("no data"), never as ``-1`` or ``0``.

Series of one metric that differ in labels (vLLM's ``engine="0"``, ``engine="1"`` under data
parallelism) are combined: request counts are summed, KV-cache usage takes the maximum (the
fullest engine is the one that preempts first).

Only the text format (version 0.0.4) is parsed: ``# HELP``/``# TYPE`` and other comments are
skipped, label values may hold the escapes ``\\\\``, ``\\"`` and ``\\n``, values may be
``NaN``/``+Inf``/``-Inf`` and an optional timestamp may follow the value. A malformed line
raises :class:`PromTextError` naming its line number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from preheat.core.metric_names import (
    VLLM_KV_CACHE_USAGE_PERC,
    VLLM_NUM_REQUESTS_RUNNING,
    VLLM_NUM_REQUESTS_WAITING,
)

__all__ = [
    "Histogram",
    "ModelServerMetricNames",
    "ModelServerStats",
    "PromTextError",
    "Sample",
    "histogram",
    "model_server_stats",
    "parse_model_server_stats",
    "parse_samples",
]


class PromTextError(ValueError):
    """A line of the exposition could not be parsed."""

    def __init__(self, line_no: int, problem: str, line: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {line_no}: {problem}: {shown!r}")
        self.line_no = line_no
        self.problem = problem


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class ModelServerMetricNames:
    """Which metric names carry the model server's load (vLLM's by default)."""

    num_requests_waiting: str = VLLM_NUM_REQUESTS_WAITING
    num_requests_running: str = VLLM_NUM_REQUESTS_RUNNING
    kv_cache_usage: str = VLLM_KV_CACHE_USAGE_PERC


@dataclass(frozen=True)
class ModelServerStats:
    """The model server's load; ``None``: the metric was not exposed."""

    num_waiting: int | None = None
    num_running: int | None = None
    kv_cache_usage: float | None = None  # 0..1


@dataclass(frozen=True)
class Histogram:
    """A histogram's cumulative buckets ``(le, count)`` sorted by ``le`` (``+Inf`` last),
    summed over every series that matched; ``count``/``sum`` are None when not exposed."""

    buckets: tuple[tuple[float, float], ...] = ()
    count: float | None = None
    sum: float | None = None
    series: int = 0  # how many label sets were summed


# --- parsing ------------------------------------------------------------------------------


def _is_name_start(c: str) -> bool:
    return c.isalpha() or c in "_:"


def _is_name_char(c: str) -> bool:
    return c.isalnum() or c in "_:"


def _parse_value(text: str) -> float:
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(text)  # ValueError on garbage


def _parse_line(line_no: int, line: str) -> Sample:
    n = len(line)
    i = 0
    if not _is_name_start(line[0]):
        raise PromTextError(line_no, "a metric name must start with a letter, '_' or ':'", line)
    while i < n and _is_name_char(line[i]):
        i += 1
    name = line[:i]
    labels: dict[str, str] = {}
    if i < n and line[i] == "{":
        i += 1
        while True:
            while i < n and line[i] in " \t":
                i += 1
            if i < n and line[i] == "}":
                i += 1
                break
            start = i
            while i < n and _is_name_char(line[i]):
                i += 1
            label = line[start:i]
            if not label:
                raise PromTextError(line_no, "expected a label name", line)
            while i < n and line[i] in " \t":
                i += 1
            if i < n and line[i] == "=":
                i += 1
                while i < n and line[i] in " \t":
                    i += 1
            else:
                i = n
            if i >= n or line[i] != '"':
                raise PromTextError(line_no, f"expected '=\"' after label {label!r}", line)
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise PromTextError(line_no, f"unterminated value of label {label!r}", line)
                c = line[i]
                if c == "\\":
                    if i + 1 >= n:
                        raise PromTextError(line_no, "dangling backslash in a label value", line)
                    nxt = line[i + 1]
                    chars.append("\n" if nxt == "n" else nxt)
                    i += 2
                    continue
                if c == '"':
                    i += 1
                    break
                chars.append(c)
                i += 1
            if label in labels:
                raise PromTextError(line_no, f"label {label!r} given twice", line)
            labels[label] = "".join(chars)
            while i < n and line[i] in " \t":
                i += 1
            if i < n and line[i] == ",":
                i += 1
                continue
            if i < n and line[i] == "}":
                i += 1
                break
            raise PromTextError(line_no, "expected ',' or '}' in the label set", line)
    rest = line[i:].split()
    if not rest:
        raise PromTextError(line_no, f"no value for {name!r}", line)
    if len(rest) > 2:
        raise PromTextError(line_no, "trailing text after the value and timestamp", line)
    try:
        value = _parse_value(rest[0])
    except ValueError:
        raise PromTextError(line_no, f"value {rest[0]!r} is not a number", line) from None
    ts: int | None = None
    if len(rest) == 2:
        try:
            ts = int(rest[1])
        except ValueError:
            raise PromTextError(line_no, f"timestamp {rest[1]!r} is not an integer", line) from None
    return Sample(name, labels, value, ts)


def parse_samples(text: str, only: Iterable[str] | None = None) -> list[Sample]:
    """Every sample of a text exposition, in order. Raises :class:`PromTextError`.

    With ``only``, just the samples of those metric names are parsed (and checked): the
    rest of the page is skipped unread, which is what a router scraping many engines every
    second needs (a vLLM page is hundreds of lines; it wants three gauges)."""
    wanted: tuple[str, ...] | None = None
    if only is not None:
        wanted = tuple(f"{n}{sep}" for n in only for sep in ("{", " "))
    out: list[Sample] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if wanted is not None and not line.startswith(wanted):
            continue
        out.append(_parse_line(line_no, line))
    return out


# --- typed views --------------------------------------------------------------------------


def _matches(labels: Mapping[str, str], want: Mapping[str, str] | None) -> bool:
    return want is None or all(labels.get(k) == v for k, v in want.items())


def _values(samples: Iterable[Sample], name: str, want: Mapping[str, str] | None) -> list[float]:
    return [
        s.value
        for s in samples
        if s.name == name and _matches(s.labels, want) and not math.isnan(s.value)
    ]


def model_server_stats(
    samples: Iterable[Sample],
    names: ModelServerMetricNames | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> ModelServerStats:
    """The load gauges among ``samples`` (only series carrying every label in ``labels``)."""
    names = names if names is not None else ModelServerMetricNames()
    samples = list(samples)
    waiting = _values(samples, names.num_requests_waiting, labels)
    running = _values(samples, names.num_requests_running, labels)
    usage = _values(samples, names.kv_cache_usage, labels)
    return ModelServerStats(
        num_waiting=round(sum(waiting)) if waiting else None,
        num_running=round(sum(running)) if running else None,
        kv_cache_usage=max(usage) if usage else None,
    )


def parse_model_server_stats(
    text: str,
    names: ModelServerMetricNames | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> ModelServerStats:
    """``model_server_stats(parse_samples(text), names, labels=labels)``, parsing only
    the three gauges' lines."""
    names = names if names is not None else ModelServerMetricNames()
    only = (names.num_requests_waiting, names.num_requests_running, names.kv_cache_usage)
    return model_server_stats(parse_samples(text, only), names, labels=labels)


def histogram(
    samples: Iterable[Sample], name: str, *, labels: Mapping[str, str] | None = None
) -> Histogram:
    """The buckets of histogram ``name`` (its ``name_bucket`` series), summed per ``le`` over
    every series carrying the labels in ``labels``; empty when the histogram is absent."""
    per_le: dict[float, float] = {}
    seen: set[tuple[tuple[str, str], ...]] = set()
    count: float | None = None
    total: float | None = None
    bucket_name, count_name, sum_name = f"{name}_bucket", f"{name}_count", f"{name}_sum"
    for s in samples:
        if not _matches(s.labels, labels):
            continue
        if s.name == bucket_name:
            le_text = s.labels.get("le")
            if le_text is None:
                continue
            try:
                le = _parse_value(le_text)
            except ValueError:
                continue
            per_le[le] = per_le.get(le, 0.0) + s.value
            rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            seen.add(rest)
        elif s.name == count_name:
            count = (count or 0.0) + s.value
        elif s.name == sum_name:
            total = (total or 0.0) + s.value
    return Histogram(
        buckets=tuple(sorted(per_le.items())),
        count=count,
        sum=total,
        series=len(seen),
    )
