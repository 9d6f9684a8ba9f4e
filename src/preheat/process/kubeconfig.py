"""Credentials for the Kubernetes API, as the operator and the router find them: the pod's
service account in a cluster, else a kubeconfig (``--kubeconfig``, ``KUBECONFIG`` or
``~/.kube/config``). Without either, :class:`KubeConfigError` says which was tried and why it
failed: ``kubernetes_asyncio`` reads a missing file as an empty one and calls it "Invalid
kube-config file. Expected key current-context", and both commands ended in a traceback."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

__all__ = ["KubeConfigError", "load"]


class KubeConfigError(Exception):
    """No credentials to reach a cluster: not in a pod, and no usable kubeconfig."""


async def load(configuration: Any = None, kubeconfig: str | None = None) -> None:
    """Loads the credentials into ``configuration`` (a ``kubernetes_asyncio`` client
    ``Configuration``; None: the client's default one). ``KUBECONFIG`` is read now."""
    from kubernetes_asyncio import config

    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return
    except config.ConfigException:
        pass
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    where = (
        f"--kubeconfig {kubeconfig}"
        if kubeconfig
        else f"KUBECONFIG={path}"
        if path
        else "~/.kube/config"
    )
    why = f"no cluster to talk to: not in a pod (no service account), and {where}"
    first = Path(path.split(os.pathsep)[0]) if path else Path.home() / ".kube" / "config"
    if not await asyncio.to_thread(first.is_file):
        raise KubeConfigError(f"{why}: no such file")
    try:
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    except (config.ConfigException, OSError) as e:
        raise KubeConfigError(f"{why}: {e}") from None
