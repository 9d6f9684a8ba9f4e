"""Does a pool fit this machine? Checked by ``preheat up`` before it starts anything.

:func:`fits` is pure: the pool's peak worker count and per-worker memory
(:class:`PoolNeeds`) against what the machine has (:class:`Machine`), with the user's
overrides (:class:`Limits`), into a :class:`Verdict` whose ``reason`` names the numbers.
The adapters around it (:func:`read_machine`, :func:`pool_needs`) read ``/proc/meminfo``,
the CPU affinity, ``RLIMIT_NPROC`` and the model's size on disk.

The figures:

- **peak workers**: ``replicas.max + warmStandby`` (the most worker processes the pool
  runs at once, draining ones aside).
- **worker count limit**: ``SIM_WORKERS_PER_CPU`` sim workers per CPU (a sim worker is
  one Python process, mostly idle between its simulated steps) or one vLLM worker per
  ``CPUS_PER_VLLM_WORKER`` CPUs, at most ``MAX_WORKERS`` and half of ``RLIMIT_NPROC``;
  ``--max-workers N`` replaces it.
- **worker memory**: ``--worker-memory`` if given, else the pool's
  ``spec.resources.memory``, else an estimate: a sim worker's resident set
  (``SIM_WORKER_BYTES``: 60 MiB measured idle on Linux x86-64, Python 3.11, with room for a
  busy worker's prefix-cache index), a vLLM worker's runtime (``VLLM_BASE_BYTES``) plus its
  weights (the model folder's size on disk, a ``hostPath`` or the Hugging Face cache) plus
  its CPU KV cache (``VLLM_CPU_KVCACHE_SPACE`` GiB, default 4).
- **usable memory**: ``MEMORY_FRACTION`` of ``MemAvailable`` (the rest stays with the
  machine's other processes); the router takes ``ROUTER_BYTES`` of it.

Several pools (``preheat up -f a.yaml -f b.yaml``) are checked together
(:func:`fits_pools`): each pool's peak takes its share of its engine's worker limit, the
shares must add up to at most the machine, and their memory plus one router's must fit.

``--allow-oversubscribe`` turns a refusal into a warning.
"""

from __future__ import annotations

import math
import os
import re
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from preheat.core.pool import PoolConfig

MiB = 1 << 20
GiB = 1 << 30

SIM_WORKER_BYTES = 150 * MiB
ROUTER_BYTES = 200 * MiB
VLLM_BASE_BYTES = 3 * GiB  # torch + vLLM imported, before weights and KV cache
VLLM_DEFAULT_KV_GIB = 4.0  # vLLM's CPU backend: VLLM_CPU_KVCACHE_SPACE when unset
SIM_WORKERS_PER_CPU = 4
CPUS_PER_VLLM_WORKER = 4
MAX_WORKERS = 64  # a laptop's sane ceiling, whatever its CPU count
MEMORY_FRACTION = 0.8

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


def parse_bytes(text: str) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``2Gi``, ``1.5G``, ``1000000``) in bytes;
    ValueError naming the text otherwise."""
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise ValueError(
            f"not a memory size: {text!r} (expected a number with an optional unit: "
            "Ki, Mi, Gi, Ti, k, M, G, T)"
        )
    value = float(m.group(1)) * _UNITS[m.group(2) or ""]
    if value <= 0:
        raise ValueError(f"a memory size must be > 0, got {text!r}")
    return int(value)


def human_bytes(n: float) -> str:
    """``150 MiB``, ``1.5 GiB``: binary units, three significant digits."""
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class Machine:
    """What this machine has, as read at start-up."""

    cpus: int
    mem_available_bytes: int | None  # /proc/meminfo MemAvailable; None: unknown
    nproc_limit: int | None = None  # RLIMIT_NPROC soft limit; None: unlimited


@dataclass(frozen=True)
class PoolNeeds:
    """What the pool asks for at its peak."""

    engine: str  # sim | vllm
    workers: int  # replicas.max + warmStandby
    workers_why: str  # "replicas.max 4 + warmStandby 1"
    worker_bytes: int
    worker_bytes_why: str  # where the per-worker figure comes from


@dataclass(frozen=True)
class Limits:
    """The user's overrides."""

    max_workers: int = 0  # --max-workers; 0: from the machine
    allow_oversubscribe: bool = False


@dataclass(frozen=True)
class Verdict:
    fits: bool
    reason: str  # why not (or, when it fits, the figures it was checked with)
    worker_limit: int  # the most worker processes `preheat up` will run at once
    need_bytes: int
    usable_bytes: int | None


def worker_limit(engine: str, machine: Machine, limits: Limits) -> tuple[int, str]:
    """The most worker processes this machine takes, and how that was worked out."""
    if limits.max_workers > 0:
        return limits.max_workers, f"--max-workers {limits.max_workers}"
    cpus = max(1, machine.cpus)
    if engine == "sim":
        n, why = cpus * SIM_WORKERS_PER_CPU, f"{cpus} CPUs x {SIM_WORKERS_PER_CPU} sim workers"
    else:
        n = max(1, cpus // CPUS_PER_VLLM_WORKER)
        why = f"{cpus} CPUs / {CPUS_PER_VLLM_WORKER} per vLLM worker"
    if n > MAX_WORKERS:
        n, why = MAX_WORKERS, f"at most {MAX_WORKERS} on one machine"
    if machine.nproc_limit is not None and n > machine.nproc_limit // 2:
        n = max(1, machine.nproc_limit // 2)
        why = f"half of RLIMIT_NPROC {machine.nproc_limit}"
    return n, why


def fits(needs: PoolNeeds, machine: Machine, limits: Limits = Limits()) -> Verdict:
    """Whether ``needs`` fits ``machine`` (worker count, then memory); every reason at once."""
    limit, limit_why = worker_limit(needs.engine, machine, limits)
    need = needs.workers * needs.worker_bytes + ROUTER_BYTES
    usable = (
        None
        if machine.mem_available_bytes is None
        else int(machine.mem_available_bytes * MEMORY_FRACTION)
    )
    problems = []
    if needs.workers > limit:
        problems.append(
            f"up to {needs.workers} workers ({needs.workers_why}) but this machine runs at "
            f"most {limit} ({limit_why})"
        )
    memory = (
        f"{needs.workers} x {human_bytes(needs.worker_bytes)} ({needs.worker_bytes_why}) + "
        f"{human_bytes(ROUTER_BYTES)} for the router = {human_bytes(need)}"
    )
    if usable is not None and need > usable:
        assert machine.mem_available_bytes is not None
        problems.append(
            f"{memory} but {human_bytes(usable)} is usable "
            f"({MEMORY_FRACTION:.0%} of MemAvailable {human_bytes(machine.mem_available_bytes)})"
        )
    if not problems:
        have = "memory unknown" if usable is None else f"{human_bytes(usable)} usable"
        return Verdict(True, f"{memory}; {have}; {limit} workers at most", limit, need, usable)
    reason = "; ".join(problems)
    if limits.allow_oversubscribe:
        return Verdict(
            True,
            f"oversubscribed (--allow-oversubscribe): {reason}",
            max(limit, needs.workers),
            need,
            usable,
        )
    return Verdict(False, reason, limit, need, usable)


@dataclass(frozen=True)
class PoolsVerdict:
    """:class:`Verdict` for several pools behind one router."""

    fits: bool
    reason: str
    worker_limits: tuple[int, ...]  # per pool, in the order given: its process cap
    need_bytes: int
    usable_bytes: int | None


def fits_pools(
    pools: Sequence[tuple[str, PoolNeeds]], machine: Machine, limits: Limits = Limits()
) -> PoolsVerdict:
    """Whether every pool of ``pools`` (name, needs) fits ``machine`` at once, their peaks
    counted together: each pool's peak is a share of its engine's worker limit
    (:func:`worker_limit`; ``--max-workers`` is one limit for all), the shares add up to at
    most 1; the workers' memory plus one router's fits the usable memory. Each pool's
    process cap is its share of the machine scaled to fill it (at least its peak when the
    pools fit). Every reason at once."""
    shares = []
    parts = []
    for name, needs in pools:
        limit, limit_why = worker_limit(needs.engine, machine, limits)
        shares.append((needs.workers / limit, limit))
        parts.append(
            f"{name}: {needs.workers} ({needs.workers_why}) of at most {limit} ({limit_why})"
        )
    total = sum(share for share, _ in shares)
    need = sum(n.workers * n.worker_bytes for _, n in pools) + ROUTER_BYTES
    usable = (
        None
        if machine.mem_available_bytes is None
        else int(machine.mem_available_bytes * MEMORY_FRACTION)
    )
    caps = tuple(
        max(needs.workers, math.floor(share / total * limit + 1e-9) if total > 0 else 0)
        for (share, limit), (_, needs) in zip(shares, pools, strict=True)
    )
    workers = sum(n.workers for _, n in pools)
    problems = []
    if total > 1 + 1e-9:
        problems.append(
            f"{len(pools)} pools need up to {workers} workers together, {total:.0%} of what "
            f"this machine runs ({'; '.join(parts)})"
        )
    memory = (
        " + ".join(
            f"{n.workers} x {human_bytes(n.worker_bytes)} ({name}: {n.worker_bytes_why})"
            for name, n in pools
        )
        + f" + {human_bytes(ROUTER_BYTES)} for the router = {human_bytes(need)}"
    )
    if usable is not None and need > usable:
        assert machine.mem_available_bytes is not None
        problems.append(
            f"{memory} but {human_bytes(usable)} is usable "
            f"({MEMORY_FRACTION:.0%} of MemAvailable {human_bytes(machine.mem_available_bytes)})"
        )
    if not problems:
        have = "memory unknown" if usable is None else f"{human_bytes(usable)} usable"
        return PoolsVerdict(
            True, f"{memory}; {have}; workers {total:.0%} of the machine", caps, need, usable
        )
    reason = "; ".join(problems)
    if limits.allow_oversubscribe:
        return PoolsVerdict(
            True,
            f"oversubscribed (--allow-oversubscribe): {reason}",
            caps,
            need,
            usable,
        )
    return PoolsVerdict(False, reason, caps, need, usable)


# --- adapters -------------------------------------------------------------------------------


def read_machine(meminfo: Path = Path("/proc/meminfo")) -> Machine:
    """This machine: CPUs this process may use, MemAvailable, RLIMIT_NPROC."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    available: int | None = None
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            key, _, rest = line.partition(":")
            if key == "MemAvailable":
                available = int(rest.split()[0]) * 1024  # kB
                break
    except (OSError, ValueError, IndexError):
        available = None
    nproc: int | None = None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
        nproc = None if soft == resource.RLIM_INFINITY else int(soft)
    except (AttributeError, OSError, ValueError):
        nproc = None
    return Machine(cpus=cpus, mem_available_bytes=available, nproc_limit=nproc)


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links followed once); 0 if unreadable."""
    total = 0
    try:
        for root, _dirs, files in os.walk(path, followlinks=False):
            for f in files:
                try:
                    total += os.stat(os.path.join(root, f)).st_size
                except OSError:
                    continue
    except OSError:
        return 0
    return total


def model_bytes(config: PoolConfig, hf_home: Path | None = None) -> tuple[int, str]:
    """The model's weights on disk: its ``hostPath`` folder, or its Hugging Face cache
    entry; (0, why not) when neither is here."""
    src = config.model.source
    if src.kind == "hostPath" and src.path:
        n = folder_bytes(Path(src.path))
        return (n, f"weights {human_bytes(n)} in {src.path}") if n else (0, "")
    home = hf_home or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    name = config.model.name
    if "/" in name:
        entry = home / "hub" / ("models--" + name.replace("/", "--")) / "blobs"
        n = folder_bytes(entry)
        if n:
            return n, f"weights {human_bytes(n)} in the Hugging Face cache"
    local = Path(name)
    if local.is_dir():
        n = folder_bytes(local)
        if n:
            return n, f"weights {human_bytes(n)} in {name}"
    return 0, ""


def pool_needs(
    config: PoolConfig,
    *,
    declared_bytes: int = 0,
    weights_bytes: int = 0,
    weights_why: str = "",
    kv_gib: float = VLLM_DEFAULT_KV_GIB,
) -> PoolNeeds:
    """The pool's peak (``config`` as it runs here: its engine already chosen) and the
    per-worker memory: ``declared_bytes`` (``--worker-memory``), else the pool's
    ``resources.memory``, else the engine's estimate."""
    r = config.replicas
    workers = r.max + r.warm_standby
    why_n = f"replicas.max {r.max} + warmStandby {r.warm_standby}"
    engine = config.engine.kind
    if declared_bytes > 0:
        per, why = declared_bytes, "--worker-memory"
    elif config.resources.memory:
        per, why = parse_bytes(config.resources.memory), "the pool's resources.memory"
    elif engine == "sim":
        per, why = SIM_WORKER_BYTES, "a sim worker's estimate"
    else:
        kv = int(kv_gib * GiB)
        per = VLLM_BASE_BYTES + weights_bytes + kv
        weights = weights_why or "weights not found on disk: pass --worker-memory"
        why = f"vLLM estimate: runtime {human_bytes(VLLM_BASE_BYTES)}, {weights}, KV {kv_gib:g} GiB"
    return PoolNeeds(
        engine=engine, workers=workers, workers_why=why_n, worker_bytes=per, worker_bytes_why=why
    )


def check(
    config: PoolConfig,
    limits: Limits,
    *,
    declared_bytes: int = 0,
    machine: Machine | None = None,
) -> Verdict:
    """:func:`fits` for ``config`` on this machine (the adapters' reads included)."""
    return fits(needs_here(config, declared_bytes), machine or read_machine(), limits)


def check_pools(
    configs: Sequence[tuple[str, PoolConfig]],
    limits: Limits,
    *,
    declared_bytes: int = 0,
    machine: Machine | None = None,
) -> PoolsVerdict:
    """:func:`fits_pools` for ``configs`` (name, config) on this machine."""
    needs = [(name, needs_here(c, declared_bytes)) for name, c in configs]
    return fits_pools(needs, machine or read_machine(), limits)


def needs_here(config: PoolConfig, declared_bytes: int = 0) -> PoolNeeds:
    """:func:`pool_needs` with the weights and KV cache size read from this machine."""
    weights, weights_why = (0, "")
    kv_gib = VLLM_DEFAULT_KV_GIB
    if config.engine.kind != "sim" and not declared_bytes and not config.resources.memory:
        weights, weights_why = model_bytes(config)
        try:
            kv_gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or VLLM_DEFAULT_KV_GIB)
        except ValueError:
            kv_gib = VLLM_DEFAULT_KV_GIB
        if not math.isfinite(kv_gib) or kv_gib < 0:
            kv_gib = VLLM_DEFAULT_KV_GIB
    return pool_needs(
        config,
        declared_bytes=declared_bytes,
        weights_bytes=weights,
        weights_why=weights_why,
        kv_gib=kv_gib,
    )


__all__ = [
    "Limits",
    "Machine",
    "PoolNeeds",
    "PoolsVerdict",
    "Verdict",
    "check",
    "check_pools",
    "fits",
    "fits_pools",
    "human_bytes",
    "needs_here",
    "parse_bytes",
    "pool_needs",
    "read_machine",
    "worker_limit",
]
