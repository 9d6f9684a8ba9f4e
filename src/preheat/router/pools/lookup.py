"""Which pool serves a request's ``model``: a pure lookup over a snapshot of the pools.

:func:`model_table` maps every name a request may give (each pool's model and aliases) to
its pool's key; a name two pools claim goes to the first by key, and the conflict is
reported. :func:`resolve` answers for one request: the pool, or the error to send back:
``NOT_FOUND`` (HTTP 404, code ``model_not_found``) for a model nobody serves,
``INVALID_ARGUMENT`` for a request that names no model when the router serves several.
A router with a single pool and no aliases takes every request to it without reading the
model: the pool's own validation answers as a single-pool router always did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.router.pools.spec import PoolSpec


@dataclass(frozen=True)
class ModelTable:
    by_name: Mapping[str, str]  # model name or alias -> pool key
    canonical: Mapping[str, str]  # model name or alias -> the pool's model name
    served: tuple[str, ...]  # every servable name, in pool order
    only: str | None  # the one pool's key when there is one and it needs no lookup
    conflicts: tuple[str, ...]  # what was ignored, for the log


def model_table(specs: Sequence[PoolSpec]) -> ModelTable:
    """The table over ``specs`` (sorted by key: the first claim of a name wins)."""
    by_name: dict[str, str] = {}
    canonical: dict[str, str] = {}
    served: list[str] = []
    conflicts: list[str] = []
    ordered = sorted(specs, key=lambda s: s.key)
    for spec in ordered:
        for name in spec.names:
            owner = by_name.get(name)
            if owner is not None:
                if owner != spec.key:
                    conflicts.append(
                        f"model {name!r} of pool {spec.key} is already served by pool {owner}; "
                        "ignored for this pool"
                    )
                continue
            by_name[name] = spec.key
            canonical[name] = spec.model
            served.append(name)
    only = None
    if len(ordered) == 1 and not ordered[0].aliases:
        only = ordered[0].key
    return ModelTable(by_name, canonical, tuple(served), only, tuple(conflicts))


def resolve(table: ModelTable, model: str) -> str:
    """The key of the pool that serves ``model``; raises the request's ``PreheatError``."""
    if table.only is not None:
        return table.only
    pools = set(table.by_name.values())
    if not model and len(pools) == 1:
        return next(iter(pools))
    if not model and pools:
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT,
            "the request names no model, and this router serves several: "
            + (", ".join(table.served) or "none"),
            param="model",
        )
    key = table.by_name.get(model)
    if key is None:
        raise PreheatError(
            ErrorCode.NOT_FOUND,
            unknown_model(model, table.served),
            reason=Reason.MODEL_NOT_FOUND,
            param="model",
        )
    return key


def unknown_model(model: str, served: Sequence[str]) -> str:
    """OpenAI's sentence for a model that is not served, then what is."""
    what = ", ".join(f"`{m}`" for m in served) if served else "no model yet"
    return (
        f"The model `{model}` does not exist or you do not have access to it "
        f"(this router serves {what})."
    )
