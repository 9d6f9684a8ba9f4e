"""The router's endpoints layer: discovery sources feed an :class:`EndpointStore`, which
keeps each worker's lifecycle, load, cached prefix blocks and RTT and hands the scheduler
immutable :class:`~preheat.core.routing.types.Endpoint` snapshots."""

from preheat.core.promtext import ModelServerMetricNames
from preheat.router.endpoints.datastore import EndpointInfoView, EndpointStore
from preheat.router.endpoints.discovery import DiscoveredEndpoint, DiscoverySource
from preheat.router.endpoints.kubernetes import KubernetesDiscovery
from preheat.router.endpoints.static import StaticDiscovery, StaticDiscoveryError

__all__ = [
    "DiscoveredEndpoint",
    "DiscoverySource",
    "EndpointInfoView",
    "EndpointStore",
    "KubernetesDiscovery",
    "ModelServerMetricNames",
    "StaticDiscovery",
    "StaticDiscoveryError",
]
