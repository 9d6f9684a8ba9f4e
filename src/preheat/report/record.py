"""The run record: one folder per run, the contract between the things that produce runs
(`preheat load` against a live pool, `preheat up`'s runtime, `preheat simulate`) and the
one thing that reads them (`preheat report`).

A run folder holds:

- ``meta.json``: :class:`RunMeta` (what ran, against what, live or simulated, objectives).
- ``requests.jsonl``: one :class:`RequestOutcome` per request sent, whatever its outcome.
- ``events.jsonl``: :class:`ScaleEvent` lines (scaling decisions with their reasons, worker
  starts, promotions, crashes, restarts).
- ``replicas.jsonl``: :class:`ReplicaSample` lines (replicas by state over time).
- ``settings.json`` (live runs of ``preheat up``): :class:`RunSettings`, the control plane's
  and the workers' settings, which ``preheat simulate --from-run`` takes to model the same run.

Times are seconds since the run started (``t_s``), on the producer's clock: the wall clock for
a live run, the virtual clock for a simulated one. Latencies are milliseconds. Every line is a
JSON object; unknown keys are ignored on reading, so producers may add fields.

Two live producers may share one folder (``preheat up --out RUN`` writes the events and
replicas, ``preheat load --out RUN`` the requests): each opens only its own files
(``RunWriter(..., parts=...)``), and the one that joins an existing folder reads its
``meta.json`` (:func:`read_meta`) and keeps its ``t0_unix`` (the wall-clock second that
``t_s = 0`` stands for) so that both files share one time axis; :func:`update_meta` changes
some fields of ``meta.json`` without dropping what the other producer wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

Outcome = Literal["ok", "rejected", "error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "rejected", "error")

META_FILE = "meta.json"
REQUESTS_FILE = "requests.jsonl"
EVENTS_FILE = "events.jsonl"
REPLICAS_FILE = "replicas.jsonl"
SETTINGS_FILE = "settings.json"


@dataclass
class RunMeta:
    """What ran. ``simulated`` marks a report as coming from ``preheat simulate``."""

    name: str
    simulated: bool = False
    started_at: str = ""  # ISO 8601 wall-clock time the run started (informational)
    duration_s: float = 0.0
    pool: str = ""  # pool name (or the pool file)
    trace: str = ""  # trace file and the options it was replayed with
    target: str = ""  # router address, or "simulated"
    ttft_objective_ms: float = 0.0  # 0 = no objective
    e2e_objective_ms: float = 0.0
    command: str = ""  # the command line that produced the run
    # each traffic class's TTFT target (ms): the report judges a class's requests by it
    # (a class not listed, or "" for requests of no class: by ttft_objective_ms)
    class_ttft_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    t0_unix: float = 0.0  # wall-clock time (time.time()) of t_s = 0; 0 = not recorded


@dataclass
class RequestOutcome:
    """One request as its client saw it.

    ``outcome`` is ``ok`` (finished), ``rejected`` (admission said no: 429 / RESOURCE_EXHAUSTED)
    or ``error`` (anything else, with ``error`` saying what). ``stages_ms`` breaks TTFT down
    as the server reported it (e.g. ``queue``, ``prefill``, ``route``, ``network``).
    """

    request_id: str
    t_s: float  # when it was sent
    outcome: Outcome
    ttft_ms: float = 0.0
    e2e_ms: float = 0.0
    itl_ms: list[float] = field(default_factory=list)
    # the same, run-length encoded: [[ms, count], ...] (the simulator's compact form; a
    # reader wants :meth:`itl_values`, which expands whichever is present)
    itl_runs_ms: list[list[float]] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    session_id: str = ""
    endpoint: str = ""  # the pod/worker that served it, where known
    region: str = ""  # the client's region, where the run has several
    slo_class: str = ""  # the traffic class it named ("" = none: the pool's default)
    error: str = ""
    stages_ms: dict[str, float] = field(default_factory=dict)

    def itl_values(self) -> list[float]:
        """Every inter-token latency (ms), from ``itl_ms`` or expanded from ``itl_runs_ms``."""
        if self.itl_ms or not self.itl_runs_ms:
            return list(self.itl_ms)
        out: list[float] = []
        for value, count in self.itl_runs_ms:
            out.extend([value] * int(count))
        return out


@dataclass
class ScaleEvent:
    """Something the control plane did, and why (``kind``: scale_up, scale_down, promote,
    demote, start, ready, drain, stop, crash, restart)."""

    t_s: float
    kind: str
    reason: str = ""
    pool: str = ""
    worker: str = ""
    from_replicas: int = 0
    to_replicas: int = 0


@dataclass
class ReplicaSample:
    """Replicas by state at ``t_s`` (each worker counted once)."""

    t_s: float
    active: int = 0
    standby: int = 0
    starting: int = 0
    draining: int = 0


@dataclass
class Run:
    """A whole run, read back."""

    meta: RunMeta
    requests: list[RequestOutcome]
    events: list[ScaleEvent]
    replicas: list[ReplicaSample]
    #: the files whose last line was cut off mid-write (a live run killed while writing it),
    #: left out of the record above; ``preheat report`` says so
    cut_off: tuple[str, ...] = ()


@dataclass
class RunSettings:
    """What a live pool ran with (``preheat up`` writes it when it starts): the settings that
    decide how fast it reacts, so that ``preheat simulate --from-run`` models the same run.
    Worker start-up values are the sim workers' own (None: the engine's cost model)."""

    producer: str = "preheat up"
    pool_file: str = ""
    engine: str = "sim"
    autoscale_interval_s: float = 2.0  # the autoscaler's evaluation period
    router_refresh_interval_s: float = 1.0  # the router's Status poll / /metrics scrape
    image_pull_s: float = 0.0  # local processes: nothing to pull
    worker_load_s: float | None = None  # the sim's load phase, before time_scale
    worker_warmup_s: float | None = None  # the sim's warm-up phase, before time_scale
    worker_time_scale: float | None = None
    worker_args: list[str] = field(default_factory=list)
    router_args: list[str] = field(default_factory=list)


T = TypeVar("T")


def _type_ok(annotation: str, value: object) -> bool:
    """Whether a JSON value fits a field's (string) annotation; ints pass for floats."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if annotation == "float":
        return number
    if annotation == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in ("str", "Outcome"):
        return isinstance(value, str)
    if annotation == "bool":
        return isinstance(value, bool)
    if annotation.endswith(" | None"):
        return value is None or _type_ok(annotation.removesuffix(" | None"), value)
    if annotation == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if annotation == "list[float]":
        return isinstance(value, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        )
    if annotation == "dict[str, float]":
        return isinstance(value, dict) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
        )
    if annotation == "list[list[float]]":
        return isinstance(value, list) and all(
            isinstance(v, list) and _type_ok("list[float]", v) for v in value
        )
    if annotation.startswith("dict["):
        return isinstance(value, dict)
    return True


def _from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Builds ``cls`` from a JSON object, ignoring unknown keys; a known key with a value of
    the wrong type raises TypeError naming it."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if not _type_ok(str(f.type), value):
            raise TypeError(f"field {f.name!r} must be {f.type}, got {value!r}")
        kwargs[f.name] = value
    return cls(**kwargs)


def _dump(obj: object) -> str:
    """One record as a JSON line. The records' fields are JSON values already (numbers,
    strings, lists, dicts; no nested dataclass), so a shallow mapping is what ``asdict``
    gives, without its deep copy of every ITL run (a fifth of a long simulation's time)."""
    row = {f.name: getattr(obj, f.name) for f in fields(obj)}  # type: ignore[arg-type]
    return json.dumps(row, separators=(",", ":"))


RUN_FILES = (REQUESTS_FILE, EVENTS_FILE, REPLICAS_FILE)


class RunWriter:
    """Appends a run's lines as they happen (a live run may be cut short: what was written
    stays readable). Use as a context manager, or call :meth:`close`.

    ``parts``: the line files this writer owns (truncated at start); the others are left
    alone, for another producer writing into the same folder. Writing a line of a file it
    does not own is a ``KeyError``.
    """

    def __init__(
        self, folder: Path | str, meta: RunMeta, *, parts: tuple[str, ...] = RUN_FILES
    ) -> None:
        unknown = set(parts) - set(RUN_FILES)
        if unknown:
            raise ValueError(f"unknown run files {sorted(unknown)}; one of {RUN_FILES}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.meta = meta
        self.write_meta()
        self._files: dict[str, TextIO] = {
            name: (self.folder / name).open("w", encoding="utf-8") for name in parts
        }

    def write_meta(self) -> None:
        """(Re)writes meta.json, e.g. with the final duration."""
        (self.folder / META_FILE).write_text(
            json.dumps(asdict(self.meta), indent=2) + "\n", encoding="utf-8"
        )

    def request(self, outcome: RequestOutcome) -> None:
        self._files[REQUESTS_FILE].write(_dump(outcome) + "\n")

    def event(self, event: ScaleEvent) -> None:
        self._files[EVENTS_FILE].write(_dump(event) + "\n")

    def replicas(self, sample: ReplicaSample) -> None:
        self._files[REPLICAS_FILE].write(_dump(sample) + "\n")

    def flush(self) -> None:
        for f in self._files.values():
            f.flush()

    def close(self) -> None:
        self.write_meta()
        for f in self._files.values():
            f.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_meta(folder: Path | str) -> RunMeta | None:
    """The folder's ``meta.json``, or None when there is none (or it cannot be read)."""
    path = Path(folder) / META_FILE
    try:
        return _from_dict(RunMeta, json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, TypeError):
        return None


def update_meta(folder: Path | str, **changes: Any) -> RunMeta:
    """Sets some fields of ``meta.json`` (``extra`` is merged), keeping the others."""
    root = Path(folder)
    meta = read_meta(root) or RunMeta(name=root.name)
    extra = changes.pop("extra", None)
    for key, value in changes.items():
        if not hasattr(meta, key):
            raise TypeError(f"RunMeta has no field {key!r}")
        setattr(meta, key, value)
    if extra:
        meta.extra = {**meta.extra, **extra}
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
    tmp.replace(root / META_FILE)
    return meta


def write_settings(folder: Path | str, settings: RunSettings) -> None:
    """Writes ``settings.json`` (atomically)."""
    root = Path(folder)
    tmp = root / (SETTINGS_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2) + "\n", encoding="utf-8")
    tmp.replace(root / SETTINGS_FILE)


def read_settings(folder: Path | str) -> RunSettings:
    """The folder's ``settings.json``; :class:`RunFormatError` saying what is wrong when it
    is missing or unreadable."""
    path = Path(folder) / SETTINGS_FILE
    try:
        return _from_dict(RunSettings, json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise RunFormatError(
            f"{path}: no such file (runs of `preheat up` write it; is {folder} one?)"
        ) from None
    except OSError as e:
        raise RunFormatError(f"{path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
        raise RunFormatError(f"{path}: {e}") from None


def write_run(folder: Path | str, run: Run) -> None:
    """Writes a whole run at once (the simulator's way)."""
    with RunWriter(folder, run.meta) as w:
        for r in run.requests:
            w.request(r)
        for e in run.events:
            w.event(e)
        for s in run.replicas:
            w.replicas(s)


class RunFormatError(ValueError):
    """A run folder that cannot be read, saying which file and line."""


def _lines(path: Path, cut_off: list[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                # A live run killed mid-write leaves a partial last line: tolerate only that,
                # and tell the caller (``cut_off``) so that the report can say so
                rest = f.read()
                if rest.strip():
                    raise RunFormatError(f"{path}:{n}: not JSON ({err.msg})") from None
                if cut_off is not None:
                    cut_off.append(f"{path.name}:{n}")
                return
            if not isinstance(data, dict):
                raise RunFormatError(f"{path}:{n}: expected a JSON object")
            yield n, data


def _read(path: Path, cls: type[T], cut_off: list[str] | None = None) -> list[T]:
    out: list[T] = []
    for n, data in _lines(path, cut_off):
        try:
            out.append(_from_dict(cls, data))
        except TypeError as err:
            raise RunFormatError(f"{path}:{n}: {err}") from None
    return out


def read_events(folder: Path | str) -> list[ScaleEvent]:
    """The folder's ``events.jsonl`` ([] when it has none); :class:`RunFormatError` when a
    line is bad."""
    return _read(Path(folder) / EVENTS_FILE, ScaleEvent)


def read_run(folder: Path | str) -> Run:
    """Reads a run folder; raises :class:`RunFormatError` with the file and line at fault."""
    root = Path(folder)
    meta_path = root / META_FILE
    if not meta_path.exists():
        raise RunFormatError(f"{root}: not a run folder (no {META_FILE})")
    try:
        meta = _from_dict(RunMeta, json.loads(meta_path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as err:
        raise RunFormatError(f"{meta_path}: {err}") from None
    cut_off: list[str] = []
    requests = _read(root / REQUESTS_FILE, RequestOutcome, cut_off)
    for r in requests:
        if r.outcome not in OUTCOMES:
            raise RunFormatError(
                f"{root / REQUESTS_FILE}: request {r.request_id}: outcome {r.outcome!r} "
                f"is not one of {', '.join(OUTCOMES)}"
            )
    return Run(
        meta=meta,
        requests=requests,
        events=_read(root / EVENTS_FILE, ScaleEvent, cut_off),
        replicas=_read(root / REPLICAS_FILE, ReplicaSample, cut_off),
        cut_off=tuple(cut_off),
    )


def count_outcomes(requests: Iterable[RequestOutcome]) -> dict[Outcome, int]:
    """Requests by outcome (every outcome present, zero where none)."""
    counts: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
    for r in requests:
        counts[r.outcome] += 1
    return counts
