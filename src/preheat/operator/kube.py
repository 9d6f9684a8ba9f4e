"""The one module that talks to the Kubernetes API, and converts its errors.

Objects are plain dicts (as :mod:`preheat.core.manifests` builds them). Requests go through
``kubernetes_asyncio``'s ``ApiClient`` (auth, TLS and kubeconfig/in-cluster loading) with raw
paths, so any group/version works without generated models. Errors come out as kopf's:
``TemporaryError`` (retry later: 5xx, 429, 409 conflicts, connection errors) and
``PermanentError`` (the API server refused the object: 400, 403, 422).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client as k8s_client

from preheat.core.manifests import API_VERSION, EXACT_MAPS, PLURAL
from preheat.process.kubeconfig import load as kubeconfig_load

RETRY_DELAY_S = 5.0
_TEMPORARY_STATUS = frozenset({409, 429, 500, 502, 503, 504})
_PATCH_HEADERS = {
    "Content-Type": "application/merge-patch+json",
    "Accept": "application/json",
}
_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


class Conflict(kopf.TemporaryError):
    """409 on create: the object already exists (someone else, or a retried request, made it)."""


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API: ``/api/v1`` or ``/apis/GROUP/VERSION``, plural."""

    api_version: str
    plural: str

    def path(self, namespace: str, name: str = "", subresource: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        out = f"{base}/namespaces/{namespace}/{self.plural}"
        if name:
            out += f"/{name}"
        if subresource:
            out += f"/{subresource}"
        return out


KINDS: Mapping[str, Kind] = {
    "Deployment": Kind("apps/v1", "deployments"),
    "Service": Kind("v1", "services"),
    "PodDisruptionBudget": Kind("policy/v1", "poddisruptionbudgets"),
    "ServiceMonitor": Kind("monitoring.coreos.com/v1", "servicemonitors"),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies"),
    "Pod": Kind("v1", "pods"),
    "Secret": Kind("v1", "secrets"),
}
POOLS = Kind(API_VERSION, PLURAL)


def kind_of(obj: Mapping[str, Any]) -> Kind:
    return KINDS[str(obj["kind"])]


def _convert(exc: BaseException, what: str) -> Exception:
    """An API error as kopf's error: temporary (retry) or permanent (the input is refused)."""
    if isinstance(exc, k8s_client.ApiException):
        status = int(exc.status or 0)
        body = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or exc.reason)
        message = f"{what}: HTTP {status}: {body[:500]}"
        if status == 409:
            return Conflict(message, delay=1.0)
        if status in _TEMPORARY_STATUS or status == 0:
            return kopf.TemporaryError(message, delay=RETRY_DELAY_S)
        return kopf.PermanentError(message)
    return kopf.TemporaryError(f"{what}: {type(exc).__name__}: {exc}", delay=RETRY_DELAY_S)


def merge_patch(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes ``observed`` match ``desired`` where we own fields.

    A merge patch merges maps, so a key we no longer set inside a map we own entirely
    (:data:`preheat.core.manifests.EXACT_MAPS`, e.g. ``nodeSelector``) is sent as ``null``.
    """

    def walk(d: Mapping[str, Any], o: Any, key: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if key in EXACT_MAPS and isinstance(o, Mapping):
            out.update({k: None for k in o if k not in d})
        for k, v in d.items():
            sub = o.get(k) if isinstance(o, Mapping) else None
            out[k] = walk(v, sub, k) if isinstance(v, Mapping) else v
        return out

    return walk(desired, observed, "")


def in_cluster_server(environ: Mapping[str, str]) -> str:
    """The API server's URL inside a pod, from the env the kubelet sets (as client-go's
    ``InClusterConfig``): ``https://HOST:PORT``, an IPv6 host in brackets; "" outside one."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        return ""
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


class Kube:
    """A thin async client for the objects the operator owns (dicts in, dicts out)."""

    def __init__(self, api: k8s_client.ApiClient):
        self._api = api

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        """In-cluster credentials when running in a pod, else the kubeconfig (``KUBECONFIG``)."""
        configuration = k8s_client.Configuration()
        await kubeconfig_load(configuration, kubeconfig)
        return cls(k8s_client.ApiClient(configuration=configuration))

    async def close(self) -> None:
        await self._api.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] = _JSON_HEADERS,
        what: str,
    ) -> Any:
        try:
            return await self._api.call_api(
                path,
                method,
                header_params=dict(headers),
                body=body,
                response_types_map={200: "object", 201: "object", 202: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except (TimeoutError, k8s_client.ApiException, aiohttp.ClientError) as e:
            raise _convert(e, what) from e

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            obj = await self._call("GET", kind.path(namespace, name), what=f"get {name}")
        except kopf.PermanentError as e:
            if "HTTP 404" in str(e):
                return None
            raise
        return dict(obj)

    async def list(self, path: str) -> list[dict[str, Any]]:
        """The items of a collection ``path`` (``/apis/GROUP/VERSION/PLURAL``, ...)."""
        out = await self._call("GET", path, what=f"list {path}")
        return [dict(item) for item in (out or {}).get("items") or []]

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        kind = kind_of(obj)
        out = await self._call(
            "POST", kind.path(meta["namespace"]), body=dict(obj), what=f"create {meta['name']}"
        )
        return dict(out)

    async def patch(
        self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): maps merge, lists and scalars replace."""
        out = await self._call(
            "PATCH",
            kind.path(namespace, name),
            body=dict(patch),
            headers=_PATCH_HEADERS,
            what=f"patch {name}",
        )
        return dict(out)

    async def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``status`` into the pool's status subresource."""
        out = await self._call(
            "PATCH",
            POOLS.path(namespace, name, "status"),
            body={"status": dict(status)},
            headers=_PATCH_HEADERS,
            what=f"patch status of {name}",
        )
        return dict(out)

    async def has_api(self, group_version: str) -> bool:
        """Does the API server serve ``group_version`` (e.g. ``monitoring.coreos.com/v1``)?"""
        try:
            await self._call("GET", f"/apis/{group_version}", what=f"discover {group_version}")
        except kopf.PermanentError:
            return False
        return True
