"""The router's pools: what each is (:class:`PoolSpec`), where they come from (the
multi-pool static file, the Kubernetes API), which serves a request's model (a pure
lookup), and the set of them the front ends route through (:class:`PoolSet`)."""

from preheat.router.pools.lookup import ModelTable, model_table, resolve
from preheat.router.pools.registry import Pool, PoolSet, pool_config
from preheat.router.pools.spec import PoolSource, PoolSpec
from preheat.router.pools.static import LiteralPools, StaticPools, is_multi_pool, parse_pools

__all__ = [
    "LiteralPools",
    "ModelTable",
    "Pool",
    "PoolSet",
    "PoolSource",
    "PoolSpec",
    "StaticPools",
    "is_multi_pool",
    "model_table",
    "parse_pools",
    "pool_config",
    "resolve",
]
