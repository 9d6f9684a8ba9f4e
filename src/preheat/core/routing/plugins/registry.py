"""Every routing plugin, registered by name: config enables them by these names."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from preheat.core.routing.plugins.base import Filter, Scorer
from preheat.core.routing.plugins.decode import DecodeInterference
from preheat.core.routing.plugins.filters import Fresh, SamePool, SameRegion
from preheat.core.routing.plugins.kv_pressure import KvPressure
from preheat.core.routing.plugins.prefix import Prefix
from preheat.core.routing.plugins.queue import Queue
from preheat.core.routing.plugins.rtt import Rtt
from preheat.core.routing.plugins.session import Session

SCORERS: Mapping[str, Scorer] = MappingProxyType(
    {s.name: s for s in (Queue(), Prefix(), Rtt(), KvPressure(), Session(), DecodeInterference())}
)
FILTERS: Mapping[str, Filter] = MappingProxyType(
    {f.name: f for f in (SamePool(), Fresh(), SameRegion())}
)
