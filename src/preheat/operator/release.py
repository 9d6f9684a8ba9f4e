"""``preheat release-pools``: the chart's post-delete hook. After ``helm uninstall`` removed
the operator, take the operator's finalizer off every InferencePool, so that a pool can be
deleted (``kubectl delete ipool``) without the operator; its children go with it through
their ownerReferences.

kopf keeps its finalizer (``preheat.dev/operator``) on every pool while the operator runs
the pool's loops (its daemons need it). Helm deletes the operator's Deployment before the
hook runs, but the operator may still be terminating and put the finalizer back: the
command repeats until no pool carried it for ``--settle`` seconds, or fails after
``--timeout``. The pools themselves stay (as cert-manager leaves Certificates): delete
them first for a clean uninstall (the chart README's order).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from preheat.core.manifests import API_VERSION, OPERATOR_FINALIZER, PLURAL
from preheat.operator.kube import POOLS, Kube
from preheat.process.kubeconfig import KubeConfigError
from preheat.process.logs import LOG_FORMATS, fields, setup_logging

log = logging.getLogger(__name__)

FINALIZER = OPERATOR_FINALIZER  # kopf's settings.persistence.finalizer (handlers.startup)


def finalizers_without(pool: Mapping[str, Any], finalizer: str = FINALIZER) -> list[str] | None:
    """The pool's finalizers less ``finalizer``; None when it does not carry it."""
    held = [str(f) for f in (pool.get("metadata") or {}).get("finalizers") or []]
    return [f for f in held if f != finalizer] if finalizer in held else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="namespaces whose pools to release (repeatable); none: every namespace",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="give up (exit 1) after this many seconds"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=10.0,
        help="done once no pool carried the finalizer for this many seconds (a terminating "
        "operator may put it back meanwhile)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between passes")
    parser.add_argument("--kubeconfig", default=None, help="outside a cluster: this kubeconfig")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="json")


async def _pools(kube: Kube, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    paths = [POOLS.path(ns) for ns in namespaces] or [f"/apis/{API_VERSION}/{PLURAL}"]
    out: list[dict[str, Any]] = []
    for path in paths:
        out.extend(await kube.list(path))
    return out


async def release(
    kube: Kube, namespaces: Sequence[str], *, timeout_s: float, settle_s: float, every_s: float
) -> int:
    """Passes until no pool held the finalizer for ``settle_s``; the number released."""
    deadline = time.monotonic() + timeout_s
    clean_since: float | None = None
    released = 0
    while True:
        now = time.monotonic()
        held = 0
        for pool in await _pools(kube, namespaces):
            rest = finalizers_without(pool)
            if rest is None:
                continue
            held += 1
            meta = pool["metadata"]
            try:  # the resourceVersion makes it conditional: a concurrent change is a 409
                await kube.patch(
                    POOLS,
                    meta["namespace"],
                    meta["name"],
                    {"metadata": {"finalizers": rest, "resourceVersion": meta["resourceVersion"]}},
                )
            except kopf.TemporaryError as e:  # changed meanwhile (409): the next pass
                log.info("release_retry", extra=fields(pool=meta["name"], error=str(e)))
                continue
            released += 1
            log.info("pool_released", extra=fields(namespace=meta["namespace"], pool=meta["name"]))
        if held:
            clean_since = None
        elif clean_since is None:
            clean_since = now
        if clean_since is not None and now - clean_since >= settle_s:
            return released
        if now >= deadline:
            raise TimeoutError(
                f"pools still carry {FINALIZER} after {timeout_s:g} s: is an operator "
                "still running? (kubectl get pods -A -l app.kubernetes.io/name=preheat-operator)"
            )
        await asyncio.sleep(every_s)


async def _main(args: argparse.Namespace) -> int:
    try:
        kube = await Kube.connect(args.kubeconfig)
    except KubeConfigError as e:  # a traceback before
        log.error("no_cluster", extra=fields(error=str(e)))
        return 2
    try:
        released = await release(
            kube,
            args.namespace,
            timeout_s=args.timeout,
            settle_s=args.settle,
            every_s=args.interval,
        )
    except TimeoutError as e:
        log.error("release_timed_out", extra=fields(error=str(e)))
        return 1
    finally:
        await kube.close()
    log.info("release_done", extra=fields(released=released))
    return 0


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, level=args.log_level.upper(), component="release-pools")
    return asyncio.run(_main(args))


__all__ = ["FINALIZER", "add_arguments", "finalizers_without", "release", "run"]
