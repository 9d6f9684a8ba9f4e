"""Workload traces: load a request trace into typed :class:`TraceRequest` values.

Four formats, detected from the file (or named with ``fmt``):

``preheat`` (JSONL, ours)
    ``{"timestamp_ms": 0, "input_tokens": 812, "output_tokens": 64,
    "session_id": "s1", "prefix_block_ids": [7, 9, 12], "slo_class": "interactive"}``; the
    last three are optional (``slo_class``: the pool's traffic class the request names).
``mooncake`` (JSONL, Mooncake FAST'25 release)
    ``{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}``
    with ``len(hash_ids) == ceil(input_length / 512)``: equal ids at equal positions are a
    reusable prefix. The trace has no session ids; :func:`load_trace` can derive one.
``azure`` (CSV, Azure LLM inference traces 2023 and 2024)
    ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock timestamps; no sessions or
    prefixes.
``burstgpt`` (CSV, BurstGPT)
    ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`` with
    ``Timestamp`` in seconds from the trace's start (other columns are ignored); no sessions
    or prefixes.

In the CSV formats a row whose prompt or output is 0 tokens is not replayed but counted
(:attr:`Trace.skipped`): BurstGPT marks a failed request with 0 response tokens, and such a
row says nothing about the work a served request costs. The JSONL formats need >= 1.

Prompt text for the sim engine's word tokenizer (one word = one token) comes from
:func:`prompt_text`: block ``id`` always becomes the same ``block_tokens`` words, so requests
that share leading block ids share a cacheable text prefix; the last block is partial
(``input_tokens - block_tokens * (n - 1)`` words, a prefix of that block's full text).

Malformed input raises :class:`TraceError` naming the file and line.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any, Literal

TraceFormat = Literal["auto", "preheat", "mooncake", "azure", "burstgpt"]
FORMATS: tuple[str, ...] = ("auto", "preheat", "mooncake", "azure", "burstgpt")
SessionRule = Literal["keep", "root", "none"]

MOONCAKE_BLOCK_TOKENS = 512

#: The most requests a generated or superposed trace may hold. A request takes about 300
#: bytes in memory (the 10x-compressed diurnal day's 1.4 million peak at 450 MB), so 20
#: million is about 6 GB: the uncompressed 24-hour day's 14 million fit, and a typo in a
#: rate (``--diurnal-peak-rps 1e9``: trillions of requests) or in ``--copies`` is refused
#: before it fills the machine's memory.
MAX_TRACE_REQUESTS = 20_000_000


def check_trace_size(requests: float, what: str) -> None:
    """ValueError when ``requests`` (expected, before they are made) exceed
    :data:`MAX_TRACE_REQUESTS`, saying what asked for them."""
    if not requests <= MAX_TRACE_REQUESTS:  # NaN too
        raise ValueError(
            f"{what} would make about {requests:,.0f} requests; at most "
            f"{MAX_TRACE_REQUESTS:,} fit in memory (about 300 bytes each)"
        )


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and line."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace, ready to replay.

    ``arrival_s`` is seconds from the start of the replay (after slicing and scaling);
    ``prefix_block_ids`` name ``block_tokens``-token blocks of the prompt (empty: no
    sharing information); ``line`` is where it came from in the file.
    """

    arrival_s: float
    input_tokens: int
    output_tokens: int
    session_id: str = ""
    prefix_block_ids: tuple[int, ...] = ()
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    line: int = 0
    index: int = 0  # position in the replayed trace (0, 1, ...)
    slo_class: str = ""  # the traffic class it names ("" = the pool's default)


@dataclass(frozen=True)
class TraceOptions:
    """How to cut and scale a trace.

    ``start_s`` and ``duration_s`` select a slice in the trace's own time; arrivals are then
    measured from ``start_s`` and multiplied by ``time_scale / rate_scale`` (``time_scale
    0.1`` or ``rate_scale 10`` replay ten times faster). ``max_requests`` keeps the first N
    of the slice. ``max_input_tokens`` clips longer prompts by dropping trailing blocks,
    which keeps their shared prefix (for engines with a shorter context window).
    ``token_scale`` shrinks (or grows) prompts block by block: every full block becomes
    ``round(block_tokens * token_scale)`` tokens and the partial last one scales in
    proportion (at least 1 token), so the sharing structure is kept with less prefill work;
    it applies before ``max_input_tokens``. Output lengths are not scaled.
    ``sessions``: ``keep`` what the file says; ``root`` derives a session id from the
    conversation root (see :func:`derive_root_sessions`) when the file has none and has
    prefix blocks to find conversations by (a file without any, Azure or BurstGPT, keeps
    its own: one session per request would pin each to a hashed endpoint for no reuse);
    ``none`` drops them. ``model``: keep only the rows of that model (a BurstGPT trace's ``Model``
    column, e.g. ``ChatGPT`` or ``GPT-4``; "" keeps every row); the others are counted as
    skipped, and a format without a model column is an error. ``spread_ties_s``: requests
    that share one timestamp (BurstGPT's are whole seconds) arrive evenly over that many
    seconds from it, in file order, instead of all at once (0: as the file says); in the
    trace's own time, before ``start_s``, ``duration_s`` and the scales.
    """

    fmt: TraceFormat = "auto"
    start_s: float = 0.0
    duration_s: float | None = None
    time_scale: float = 1.0
    rate_scale: float = 1.0
    max_requests: int | None = None
    max_input_tokens: int | None = None
    token_scale: float = 1.0
    sessions: SessionRule = "keep"
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    model: str = ""
    spread_ties_s: float = 0.0

    def __post_init__(self) -> None:
        errors: list[str] = []
        if self.fmt not in FORMATS:
            errors.append(f"fmt must be one of {', '.join(FORMATS)}, got {self.fmt!r}")
        if self.start_s < 0:
            errors.append(f"start_s must be >= 0, got {self.start_s}")
        if self.duration_s is not None and self.duration_s <= 0:
            errors.append(f"duration_s must be > 0, got {self.duration_s}")
        if not self.time_scale > 0:
            errors.append(f"time_scale must be > 0, got {self.time_scale}")
        if not self.rate_scale > 0:
            errors.append(f"rate_scale must be > 0, got {self.rate_scale}")
        if self.max_requests is not None and self.max_requests < 0:
            errors.append(f"max_requests must be >= 0, got {self.max_requests}")
        if self.max_input_tokens is not None and self.max_input_tokens <= 0:
            errors.append(f"max_input_tokens must be > 0, got {self.max_input_tokens}")
        if not self.token_scale > 0 or round(self.block_tokens * self.token_scale) < 1:
            errors.append(
                f"token_scale must be > 0 and leave blocks of >= 1 token, got {self.token_scale}"
            )
        if self.sessions not in ("keep", "root", "none"):
            errors.append(f"sessions must be keep, root or none, got {self.sessions!r}")
        if self.block_tokens <= 0:
            errors.append(f"block_tokens must be > 0, got {self.block_tokens}")
        if not (self.spread_ties_s >= 0 and math.isfinite(self.spread_ties_s)):
            errors.append(f"spread_ties_s must be >= 0, got {self.spread_ties_s}")
        if errors:
            raise ValueError("; ".join(errors))


@dataclass(frozen=True)
class _Raw:
    """A parsed line before slicing: time in the trace's own seconds."""

    t_s: float
    input_tokens: int
    output_tokens: int
    session_id: str
    block_ids: tuple[int, ...]
    line: int
    slo_class: str = ""


@dataclass(frozen=True)
class _Skip:
    """A CSV row that is not replayed, and why (:data:`SKIP_REASONS`' keys)."""

    reason: str


#: Why a CSV row is not replayed, as the report says it.
SKIP_REASONS = {
    "no_output": "0 output tokens (BurstGPT: a failed request)",
    "no_prompt": "0 prompt tokens",
    "other_model": "another model than the one asked for",
}

#: The formats with a model column (``TraceOptions.model`` filters on it).
MODEL_FORMATS = frozenset({"burstgpt"})


@dataclass(frozen=True)
class Trace:
    """The requests of a trace (sorted by arrival, sliced and scaled) and the rows of the
    whole file that were not replayed, by reason (:data:`SKIP_REASONS`)."""

    requests: list[TraceRequest]
    fmt: str
    skipped: dict[str, int]

    def describe_skipped(self) -> str:
        """Empty when every row was read, else for example ``skipped 12 rows of the file:
        12 with 0 output tokens (BurstGPT: a failed request)``."""
        if not self.skipped:
            return ""
        parts = [f"{n:,} with {SKIP_REASONS[k]}" for k, n in sorted(self.skipped.items())]
        total = sum(self.skipped.values())
        return f"skipped {total:,} row{'s' if total != 1 else ''} of the file: {'; '.join(parts)}"


def load_trace(path: Path | str, options: TraceOptions | None = None) -> list[TraceRequest]:
    """Reads, slices and scales a trace; requests come back sorted by arrival."""
    return read_trace(path, options).requests


def read_trace(path: Path | str, options: TraceOptions | None = None) -> Trace:
    """:func:`load_trace`, with the format read and the rows skipped (:class:`Trace`)."""
    opts = options or TraceOptions()
    p = Path(path)
    if not p.is_file():
        raise TraceError(p, None, "no such file")
    fmt = detect_format(p) if opts.fmt == "auto" else opts.fmt
    if opts.model and fmt not in MODEL_FORMATS:
        raise TraceError(
            p, None, f"{opts.model!r}: the {fmt} format has no model column to keep it from"
        )
    if fmt == "azure":
        rows: Iterator[_Raw | _Skip] = _read_azure(p)
    elif fmt == "burstgpt":
        rows = _read_burstgpt(p, opts.model)
    else:
        rows = _read_jsonl(p, fmt, opts.block_tokens)
    raws: list[_Raw] = []
    skipped: dict[str, int] = {}
    for row in rows:
        if isinstance(row, _Skip):
            skipped[row.reason] = skipped.get(row.reason, 0) + 1
        else:
            if len(raws) >= MAX_TRACE_REQUESTS:  # every row is held to be sorted first
                raise TraceError(
                    p,
                    row.line,
                    f"more than {MAX_TRACE_REQUESTS:,} requests: at most that many fit in "
                    "memory (about 300 bytes each) and every row is read before the trace "
                    "is sorted and sliced; split the file",
                )
            raws.append(row)
    return Trace(_slice(raws, opts), fmt, skipped)


def _slice(raws: list[_Raw], opts: TraceOptions) -> list[TraceRequest]:
    """Sorts, slices and scales the parsed rows (:class:`TraceOptions`)."""
    raws.sort(key=lambda r: (r.t_s, r.line))
    if opts.spread_ties_s > 0:
        raws = spread_ties(raws, opts.spread_ties_s)
    if opts.sessions == "none":
        raws = [replace(r, session_id="") for r in raws]
    elif (
        opts.sessions == "root"
        and not any(r.session_id for r in raws)
        and any(r.block_ids for r in raws)
    ):
        roots = derive_root_sessions([r.block_ids for r in raws])
        raws = [replace(r, session_id=s) for r, s in zip(raws, roots, strict=True)]
    if not raws:
        return []
    t0 = raws[0].t_s + opts.start_s
    end = math.inf if opts.duration_s is None else t0 + opts.duration_s
    factor = opts.time_scale / opts.rate_scale
    out: list[TraceRequest] = []
    for r in raws:
        if r.t_s < t0 or r.t_s >= end:
            continue
        if opts.max_requests is not None and len(out) >= opts.max_requests:
            break
        tokens, blocks = r.input_tokens, r.block_ids
        block_tokens = opts.block_tokens
        if opts.token_scale != 1.0:
            tokens, block_tokens = _scale_tokens(
                tokens, len(blocks), block_tokens, opts.token_scale
            )
        if opts.max_input_tokens is not None and tokens > opts.max_input_tokens:
            tokens = opts.max_input_tokens
            blocks = blocks[: math.ceil(tokens / block_tokens)]
        out.append(
            TraceRequest(
                arrival_s=(r.t_s - t0) * factor,
                input_tokens=tokens,
                output_tokens=r.output_tokens,
                session_id=r.session_id,
                prefix_block_ids=blocks,
                block_tokens=block_tokens,
                line=r.line,
                index=len(out),
                slo_class=r.slo_class,
            )
        )
    return out


def spread_ties(raws: list[_Raw], over_s: float) -> list[_Raw]:
    """``raws`` (sorted by time) with each run of ``k`` rows that share a timestamp ``t``
    at ``t + i * over_s / k``, ``i`` their order in the run: evenly over ``over_s``
    seconds, the first at ``t``; sorted by time again (a run spread past the next
    timestamp interleaves with it)."""
    out: list[_Raw] = []
    for t_s, same in groupby(raws, key=lambda r: r.t_s):
        run = list(same)
        out.extend(replace(r, t_s=t_s + n * over_s / len(run)) for n, r in enumerate(run))
    out.sort(key=lambda r: (r.t_s, r.line))
    return out


def tied_share(requests: Sequence[TraceRequest]) -> float:
    """The share of ``requests`` (sorted by arrival) that arrive at the same instant as
    the one before: 0 for a trace with distinct times."""
    if len(requests) < 2:
        return 0.0
    ties = sum(1 for a, b in pairwise(requests) if a.arrival_s == b.arrival_s)
    return ties / len(requests)


def _scale_tokens(tokens: int, n_blocks: int, block_tokens: int, scale: float) -> tuple[int, int]:
    """(scaled prompt tokens, scaled block size): full blocks scale exactly, the partial last
    block in proportion (>= 1 token); without blocks the whole prompt scales (>= 1)."""
    bt = max(1, round(block_tokens * scale))
    if n_blocks == 0:
        return max(1, round(tokens * scale)), bt
    last = tokens - block_tokens * (n_blocks - 1)
    return bt * (n_blocks - 1) + min(bt, max(1, round(last * scale))), bt


def detect_format(path: Path) -> str:
    """``azure`` for a CSV with its header, else the JSONL flavour of the first record."""
    with path.open(newline="") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            if text.startswith(("{", "[")):
                obj = _parse_json(path, lineno, text)
                if "hash_ids" in obj or "input_length" in obj:
                    return "mooncake"
                if "input_tokens" in obj:
                    return "preheat"
                raise TraceError(
                    path,
                    lineno,
                    "unknown JSONL record: expected preheat fields (timestamp_ms, "
                    "input_tokens, output_tokens) or Mooncake fields (timestamp, "
                    f"input_length, output_length, hash_ids); got keys {sorted(obj)}",
                )
            header = [h.strip() for h in next(csv.reader([text]))]
            if "ContextTokens" in header and "GeneratedTokens" in header:
                return "azure"
            if "Request tokens" in header and "Response tokens" in header:
                return "burstgpt"
            raise TraceError(
                path,
                lineno,
                "not a known trace: expected JSON lines, an Azure CSV header "
                "(TIMESTAMP,ContextTokens,GeneratedTokens) or a BurstGPT one (Timestamp,"
                "Model,Request tokens,Response tokens,Total tokens,Log Type)",
            )
    raise TraceError(path, None, "empty trace file")


def derive_root_sessions(block_ids: Sequence[Sequence[int]]) -> list[str]:
    """A session id per request from its conversation root.

    Turns of one conversation repeat its earlier prompt, so they share leading block ids.
    The root is the first block after the prefix that *every* request shares (Mooncake's
    conversation trace starts every prompt with the same block 0, a system prompt that
    would otherwise put the whole trace in one session). Requests with no block beyond
    that shared prefix get their own session (``r<index>``).
    """
    common = _common_prefix_len(block_ids)
    out: list[str] = []
    for i, ids in enumerate(block_ids):
        out.append(f"c{ids[common]}" if len(ids) > common else f"r{i}")
    return out


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    non_empty = [s for s in seqs if s]
    if len(non_empty) < 2:
        return 0
    n = min(len(s) for s in non_empty)
    first = non_empty[0]
    for k in range(n):
        if any(s[k] != first[k] for s in non_empty):
            return k
    return n


def _parse_json(path: Path, lineno: int, text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(path, lineno, f"invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _int_field(path: Path, lineno: int, obj: dict[str, Any], key: str, minimum: int) -> int:
    if key not in obj:
        raise TraceError(path, lineno, f"missing field {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceError(path, lineno, f"{key} must be an integer, got {v!r}")
    if v < minimum:
        raise TraceError(path, lineno, f"{key} must be >= {minimum}, got {v}")
    return v


def _time_field(path: Path, lineno: int, obj: dict[str, Any], key: str) -> float:
    if key not in obj:
        raise TraceError(path, lineno, f"missing field {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise TraceError(path, lineno, f"{key} must be a number >= 0 (ms), got {v!r}")
    return float(v) / 1e3


def _blocks_field(
    path: Path, lineno: int, obj: dict[str, Any], key: str, input_tokens: int, block_tokens: int
) -> tuple[int, ...]:
    v = obj[key]
    if not isinstance(v, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v
    ):
        raise TraceError(path, lineno, f"{key} must be a list of integers >= 0")
    want = math.ceil(input_tokens / block_tokens)
    if v and len(v) != want:
        raise TraceError(
            path,
            lineno,
            f"{key} has {len(v)} blocks but {input_tokens} input tokens need "
            f"ceil({input_tokens}/{block_tokens}) = {want}",
        )
    return tuple(v)


def _read_jsonl(path: Path, fmt: str, block_tokens: int) -> Iterator[_Raw]:
    mooncake = fmt == "mooncake"
    t_key, in_key, out_key, blk_key = (
        ("timestamp", "input_length", "output_length", "hash_ids")
        if mooncake
        else ("timestamp_ms", "input_tokens", "output_tokens", "prefix_block_ids")
    )
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            obj = _parse_json(path, lineno, text)
            t_s = _time_field(path, lineno, obj, t_key)
            n_in = _int_field(path, lineno, obj, in_key, 1)
            n_out = _int_field(path, lineno, obj, out_key, 1)
            if mooncake and blk_key not in obj:
                raise TraceError(path, lineno, f"missing field {blk_key!r}")
            blocks = (
                _blocks_field(path, lineno, obj, blk_key, n_in, block_tokens)
                if blk_key in obj
                else ()
            )
            session = obj.get("session_id", "")
            if not isinstance(session, str | int) or isinstance(session, bool):
                raise TraceError(path, lineno, f"session_id must be a string, got {session!r}")
            klass = obj.get("slo_class", "")
            if not isinstance(klass, str):
                raise TraceError(path, lineno, f"slo_class must be a string, got {klass!r}")
            yield _Raw(t_s, n_in, n_out, str(session), blocks, lineno, klass)


def _read_azure(path: Path) -> Iterator[_Raw | _Skip]:
    t0: datetime | None = None
    for lineno, row, cols in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        stamp = row[cols["TIMESTAMP"]].strip()
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise TraceError(path, lineno, f"bad TIMESTAMP {stamp!r}") from None
        t0 = when if t0 is None else t0
        n_in = _csv_int(path, lineno, row, cols, "ContextTokens")
        n_out = _csv_int(path, lineno, row, cols, "GeneratedTokens")
        yield _csv_row((when - t0).total_seconds(), n_in, n_out, lineno)


def _read_burstgpt(path: Path, model: str) -> Iterator[_Raw | _Skip]:
    required = ("Timestamp", "Request tokens", "Response tokens", *(("Model",) if model else ()))
    for lineno, row, cols in _csv_rows(path, required):
        if model and row[cols["Model"]].strip() != model:
            yield _Skip("other_model")
            continue
        raw = row[cols["Timestamp"]].strip()
        try:
            t_s = float(raw)
        except ValueError:
            t_s = math.nan
        if not math.isfinite(t_s) or t_s < 0:
            raise TraceError(path, lineno, f"Timestamp must be seconds >= 0, got {raw!r}")
        n_in = _csv_int(path, lineno, row, cols, "Request tokens")
        n_out = _csv_int(path, lineno, row, cols, "Response tokens")
        yield _csv_row(t_s, n_in, n_out, lineno)


def _csv_row(t_s: float, n_in: int, n_out: int, lineno: int) -> _Raw | _Skip:
    """The row, or why it is not replayed (0 prompt or output tokens)."""
    if n_out == 0:
        return _Skip("no_output")
    if n_in == 0:
        return _Skip("no_prompt")
    return _Raw(t_s, n_in, n_out, "", (), lineno)


def _csv_rows(
    path: Path, required: tuple[str, ...]
) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    """(line number, cells, column index by name) of each non-empty row after the header,
    which must name ``required``; a short row is an error."""
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise TraceError(path, None, "empty trace file")
        cols = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in required if c not in cols]
        if missing:
            raise TraceError(path, 1, f"CSV header lacks {', '.join(missing)}")
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(header):
                raise TraceError(path, lineno, f"expected {len(header)} columns, got {len(row)}")
            yield lineno, row, cols


def _csv_int(path: Path, lineno: int, row: list[str], cols: dict[str, int], key: str) -> int:
    """A token count >= 0 from the row's ``key`` column."""
    raw = row[cols[key]].strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(path, lineno, f"{key} must be an integer, got {raw!r}") from None
    if value < 0:
        raise TraceError(path, lineno, f"{key} must be >= 0, got {raw}")
    return value


def block_text(block_id: int, n: int) -> str:
    """The first ``n`` words of block ``block_id``'s text (one word = one sim token).

    Words are distinct within a block and across blocks, so no two blocks share text by
    accident; the same id always gives the same words.
    """
    return " ".join(f"b{block_id:x}.{i:x}" for i in range(n))


def prompt_text(req: TraceRequest) -> str:
    """The prompt of exactly ``req.input_tokens`` words.

    With prefix block ids: block texts in order, the last one partial. Without: words unique
    to the request (no prefix sharing beyond chance).
    """
    ids = req.prefix_block_ids
    if not ids:
        return " ".join(f"u{req.index:x}.{i:x}" for i in range(req.input_tokens))
    bt = req.block_tokens
    last = req.input_tokens - bt * (len(ids) - 1)
    parts = [block_text(b, bt) for b in ids[:-1]]
    parts.append(block_text(ids[-1], last))
    return " ".join(parts)
