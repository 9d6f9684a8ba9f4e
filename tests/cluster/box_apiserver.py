"""The cluster's API server: the operator tests' kmock emulator (``kmockkit.PreheatKube``)
plus what a whole installation needs, following the Kubernetes API's semantics:

- **CRDs applied like any object** serve their kind (group, versions, scope, subresources,
  short names); custom objects get the schema's ``default`` values on create.
- **Label selectors** (``labelSelector``: ``=``, ``==``, ``!=``, ``in``, ``notin``,
  ``key``, ``!key``) on list and watch; a watched object that stops matching is sent as
  DELETED, one that starts matching as ADDED (as the API server's watch cache does).
- **Status subresources**: a PATCH of the object ignores ``status``; a PATCH of ``/status``
  changes only ``status``; a create drops ``status`` (for kinds that have the subresource).
- **Graceful pod deletion**: DELETE of a pod sets ``deletionTimestamp`` and
  ``deletionGracePeriodSeconds`` (the pod is Terminating); the kubelet deletes it for good
  (``gracePeriodSeconds=0``) once its containers stopped. Garbage collection of a pod whose
  owner is gone is such a graceful delete too.
- **RBAC**: a request with a pod's service-account token (``box:NAMESPACE:ACCOUNT``, what
  the kubelet mounts) is authorized against the Roles, ClusterRoles and their bindings
  applied (verbs, resources and subresources, apiGroups, resourceNames, ``*``); a denied
  one gets 403 Forbidden, as the API server answers, and is recorded in ``denied``; an
  allowed one is recorded in ``allowed`` as (account, verb, apiGroup, resource).
  Discovery (``/api``, ``/apis``, ``/version``) is open; the tests' own client (no token)
  is cluster-admin.
- **Events** are plain objects (``v1/events``): anyone may create them, ``events()`` reads them.

What it does not do is in this folder's README.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, rendering
from kmock._internal.k8s import KubernetesObjectNotFoundError
from kmockkit import PreheatKube
from poolkit import apply_defaults

# Built-in kinds an installation touches: "group/version/plural" -> (kind, namespaced,
# subresources).
BUILTIN: dict[str, tuple[str, bool, set[str]]] = {
    "v1/pods": ("Pod", True, {"status", "log"}),
    "v1/services": ("Service", True, {"status"}),
    "v1/endpoints": ("Endpoints", True, set()),
    "v1/secrets": ("Secret", True, set()),
    "v1/configmaps": ("ConfigMap", True, set()),
    "v1/serviceaccounts": ("ServiceAccount", True, set()),
    "v1/events": ("Event", True, set()),
    "v1/namespaces": ("Namespace", False, {"status"}),
    "v1/nodes": ("Node", False, {"status"}),
    "apps/v1/deployments": ("Deployment", True, {"status", "scale"}),
    "apps/v1/replicasets": ("ReplicaSet", True, {"status", "scale"}),
    "batch/v1/jobs": ("Job", True, {"status"}),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True, {"status"}),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True, set()),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True, set()),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False, set()),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False, set()),
    "apiextensions.k8s.io/v1/customresourcedefinitions": (
        "CustomResourceDefinition",
        False,
        {"status"},
    ),
    "events.k8s.io/v1/events": ("Event", True, set()),
    "networking.k8s.io/v1/networkpolicies": ("NetworkPolicy", True, set()),
}
WATCH_TRUE = {"1", "t", "T", "TRUE", "True", "true"}
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}


def rkey(resource: Any) -> str:
    """A kmock resource as "group/version/plural" ("v1/pods" for the core group)."""
    if resource is None:
        return ""
    return f"{resource.group}/{resource.version}/{resource.plural}".lstrip("/")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- label selectors ----------------------------------------------------------------------

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_match(selector: str, labels: Mapping[str, str]) -> bool:
    """Does ``labels`` satisfy the label selector string (the API's syntax)?"""
    for req in _split(selector):
        m = _SET.match(req)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and key in labels and labels[key] in values:
                return False
        elif "!=" in req:
            key, value = (x.strip() for x in req.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in req:
            key, value = (x.strip() for x in req.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


def selector_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


# --- the server ---------------------------------------------------------------------------


class BoxKube(PreheatKube):
    """PreheatKube plus CRDs, label selectors, status subresources and graceful pod deletion."""

    denied: list[str]
    allowed: set[tuple[str, str, str, str]]

    def _rbac_objects(self) -> Any:
        for (res, _, _), obj in list(self.objects.items()):
            if not obj.deleted and res.group == "rbac.authorization.k8s.io":
                yield obj.raw

    def declare_builtin(self) -> None:
        self.denied = []
        self.allowed = set()
        for key, (kind, namespaced, subresources) in BUILTIN.items():
            self.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, subresources=subresources, verbs=VERBS
            )
        self.crd_schemas: dict[str, dict[str, Any]] = {}

    def _subresources(self, resource: Any) -> set[str]:
        info = self.resources.get(resource) if resource is not None else None
        return set(getattr(info, "subresources", None) or ())

    # -- requests --

    async def _handle(self, request: rendering.Request) -> Any:
        res = rkey(request.resource)
        if request.action == enums.action.LIST and request.params.get("watch") in WATCH_TRUE:
            # the API server parses ?watch= as Go's ParseBool; kmock knows only "true"
            request = attrs.evolve(request, action=enums.action.WATCH)
            self._requests[-1:] = [request]  # kmock matches reactions on its recorded requests
        subject = _subject(request)
        if subject is not None and request.resource is not None and request.resource.plural:
            attributes = _attributes(request)
            if not authorized(list(self._rbac_objects()), subject, *attributes):
                verb, group, resource, namespace, name = attributes
                self.denied.append(f"{subject[0]}:{subject[1]} {verb} {group}/{resource}"
                                   f" ns={namespace} name={name}")  # fmt: skip
                return aiohttp.web.json_response(
                    {
                        "apiVersion": "v1",
                        "kind": "Status",
                        "status": "Failure",
                        "reason": "Forbidden",
                        "code": 403,
                        "message": f'{resource} is forbidden: User "system:serviceaccount:'
                        f'{subject[0]}:{subject[1]}" cannot {verb} resource "{resource}" in '
                        f'API group "{group}"'
                        + (f' in the namespace "{namespace}"' if namespace else ""),
                    },
                    status=403,
                )
            self.allowed.add((f"{subject[0]}:{subject[1]}", *attributes[:3]))
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            if res == CRDS:
                self._register_crd(request.data)
            if "status" in self._subresources(request.resource) and res != CRDS:
                request.data.pop("status", None)
            schema = self.crd_schemas.get(res)
            if schema is not None:
                _replace(request.data, apply_defaults(schema, request.data))
        elif request.action == enums.action.UPDATE and isinstance(request.data, dict):
            if "status" in self._subresources(request.resource):
                if request.subresource == "status":
                    keep = {"status": request.data.get("status") or {}}
                    version = (request.data.get("metadata") or {}).get("resourceVersion")
                    if version:
                        keep["metadata"] = {"resourceVersion": version}
                    _replace(request.data, keep)
                elif request.subresource is None:
                    request.data.pop("status", None)
        elif request.action == enums.action.DELETE and res == "v1/pods" and request.name:
            key = (request.resource, request.namespace, request.name)
            if not _immediate(request):
                # answered here: kmock would delete at once an object with no finalizers
                if key not in self.objects or self.objects[key].deleted:
                    return await self._render_error(KubernetesObjectNotFoundError())
                await self._mark_terminating(key)
                return aiohttp.web.json_response(copy.deepcopy(self.objects[key].raw))
            elif key in self.objects and not self.objects[key].deleted:
                # the kubelet's final delete: kmock would keep a Terminating object
                async with self._lock:
                    self.objects[key].patch({"metadata": {"deletionTimestamp": None}})
        return await super()._handle(request)

    def _register_crd(self, crd: Mapping[str, Any]) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            key = f"{spec['group']}/{version['name']}/{names['plural']}"
            subresources = set((version.get("subresources") or {}).keys())
            self.resources[key] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                shortnames=set(names.get("shortNames") or ()),
                categories=set(names.get("categories") or ()),
                subresources=subresources,
                verbs=VERBS,
            )
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema:
                self.crd_schemas[key] = schema

    async def _mark_terminating(self, key: Any) -> None:
        """What a DELETE of a running pod does: Terminating, the kubelet finishes it."""
        async with self._lock:
            # kmock's ObjectsArray has no .get()
            obj = self.objects[key] if key in self.objects else None  # noqa: SIM401
            if obj is None or obj.deleted:
                return
            meta = obj.raw.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                return
            grace = (obj.raw.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            obj.patch(
                {
                    "metadata": {
                        "deletionTimestamp": now_rfc3339(),
                        "deletionGracePeriodSeconds": int(grace),
                        "resourceVersion": str(self._next()),
                    }
                }
            )
            await self._buses[key[0]].put({"type": "MODIFIED", "object": obj.raw})

    async def _collect_garbage(self) -> None:
        """Owner gone: delete the dependents (cascading); pods terminate gracefully."""
        while True:
            marked = []
            async with self._lock:
                alive = {
                    obj.raw.get("metadata", {}).get("uid")
                    for obj in self.objects.values()
                    if not obj.deleted
                }
                orphans = []
                for key, obj in self.objects.items():
                    if obj.deleted:
                        continue
                    meta = obj.raw.get("metadata", {})
                    refs = meta.get("ownerReferences") or []
                    if not any(r.get("uid") not in alive for r in refs):
                        continue
                    if rkey(key[0]) == "v1/pods":
                        if not meta.get("deletionTimestamp"):
                            marked.append(key)
                        continue
                    orphans.append((key, obj))
                for key, obj in orphans:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[key[0]].put({"type": "DELETED", "object": raw})
            for key in marked:
                await self._mark_terminating(key)
            if not orphans:
                return

    # -- reads --

    async def _serve_list(self, request: rendering.Request) -> Any:
        out = await super()._serve_list(request)
        selector = request.params.get("labelSelector") or ""
        if selector:
            out["items"] = [o for o in out["items"] if label_match(selector, _labels(o))]
        out["items"] = [copy.deepcopy(o) for o in out["items"]]
        return out

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        selector = request.params.get("labelSelector") or ""
        matched: set[tuple[str, str]] = set()
        async for event in super()._serve_watch(request):
            if not selector or not isinstance(event, dict):
                yield event
                continue
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            hit = label_match(selector, _labels(obj))
            kind = event.get("type")
            if kind == "DELETED":
                if key in matched:
                    matched.discard(key)
                    yield event
            elif hit:
                first = key not in matched
                matched.add(key)
                yield {**event, "type": "ADDED" if first else kind}
            elif key in matched:
                matched.discard(key)
                yield {"type": "DELETED", "object": obj}


# --- RBAC ---------------------------------------------------------------------------------


def _subject(request: rendering.Request) -> tuple[str, str] | None:
    """(namespace, service account) of a pod's token; None for the tests' own client."""
    auth = str(request.headers.get("Authorization", ""))
    if not auth.startswith("Bearer box:"):
        return None
    _, namespace, account = auth.removeprefix("Bearer ").split(":", 2)
    return namespace, account


def _attributes(request: rendering.Request) -> tuple[str, str, str, str, str]:
    """(verb, apiGroup, resource[/subresource], namespace, name) as the authorizer sees them."""
    method = str(getattr(request.method, "value", request.method)).upper()
    if method == "GET":
        verb = "watch" if request.params.get("watch") in WATCH_TRUE else (
            "get" if request.name else "list"
        )  # fmt: skip
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(
            method, method.lower()
        )
        if verb == "delete" and not request.name:
            verb = "deletecollection"
    resource = str(request.resource.plural)
    if request.subresource:
        resource += f"/{request.subresource}"
    group = str(request.resource.group or "")
    return verb, group, resource, str(request.namespace or ""), str(request.name or "")


def _rule_allows(rule: Mapping[str, Any], verb: str, group: str, resource: str, name: str) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (has("verbs", verb) and has("apiGroups", group)):
        return False
    resources = rule.get("resources") or []
    base = resource.split("/", 1)[0]
    if not ("*" in resources or resource in resources or f"{base}/*" in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


def authorized(
    objects: list[dict[str, Any]],
    subject: tuple[str, str],
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str,
) -> bool:
    """Kubernetes RBAC: does any binding of the service account grant the request?"""
    roles = {
        (o["kind"], (o.get("metadata") or {}).get("namespace", ""), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    for binding in objects:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        where = (binding.get("metadata") or {}).get("namespace", "")
        if kind == "RoleBinding" and where != namespace:
            continue  # a RoleBinding grants only inside its namespace
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == subject[1]
            and s.get("namespace", where) == subject[0]
            for s in binding.get("subjects") or []
        ):
            continue
        ref = binding.get("roleRef") or {}
        role = roles.get(
            (ref.get("kind"), where if ref.get("kind") == "Role" else "", ref.get("name"))
        )
        if role is None:
            continue
        for rule in role.get("rules") or []:
            if _rule_allows(rule, verb, group, resource, name):
                return True
    return False


def _replace(data: dict[str, Any], new: Mapping[str, Any]) -> None:
    """A request is frozen, its body a dict: change the dict in place."""
    new = dict(new)
    data.clear()
    data.update(new)


def _immediate(request: rendering.Request) -> bool:
    """A delete with ``gracePeriodSeconds=0`` (query or DeleteOptions body): no Terminating."""
    grace = request.params.get("gracePeriodSeconds")
    if grace is None and isinstance(request.data, Mapping):
        grace = request.data.get("gracePeriodSeconds")
    return grace is not None and str(grace) == "0"
