"""``preheat simulate``: replay a trace against a pool in virtual time, with the unchanged
routing and autoscaling policies of :mod:`preheat.core` (see ``README.md`` here).

``simulate(pool, trace, options) -> (Run, SimStats)`` is the API; the run record is the one
``preheat report`` reads (``RunMeta.simulated`` is True).
"""

from preheat.simulate.options import (
    Network,
    SimInputError,
    SimOptions,
    Startup,
    apply_overrides,
    load_network,
    parse_sweep,
    pool_config,
    read_pool,
    spec_document,
)
from preheat.simulate.world import SimStats, engine_config, simulate

__all__ = [
    "Network",
    "SimInputError",
    "SimOptions",
    "SimStats",
    "Startup",
    "apply_overrides",
    "engine_config",
    "load_network",
    "parse_sweep",
    "pool_config",
    "read_pool",
    "simulate",
    "spec_document",
]
