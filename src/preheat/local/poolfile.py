"""Read the InferencePool file a platform team applies, for ``preheat up``.

The file is the whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``), as for
``kubectl apply -f``; the spec is validated by :mod:`preheat.api.pool` (the CRD's own rules).
Every problem is collected and reported at once in one :class:`PoolFileError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from preheat.api.pool import InferencePoolSpec, config_from_spec, validate_spec
from preheat.core.pool import PoolConfig
from preheat.core.reconcile import API_VERSION, KIND


class PoolFileError(Exception):
    """An unusable pool file; ``problems`` has one sentence per problem."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(self.message)

    @property
    def message(self) -> str:
        lines = "\n".join(f"  - {p}" for p in self.problems)
        n = len(self.problems)
        return f"{self.path}: {n} problem{'s' if n != 1 else ''}; nothing was started:\n{lines}"


@dataclass(frozen=True)
class PoolFile:
    path: str
    name: str
    namespace: str
    spec: InferencePoolSpec
    config: PoolConfig


def parse_pool(data: Any, path: str) -> PoolFile:
    """A pool from decoded YAML; raises :class:`PoolFileError` listing every problem."""
    if not isinstance(data, dict):
        raise PoolFileError(
            path, [f"expected an {KIND} object (apiVersion, kind, metadata, spec), got {data!r}"]
        )
    problems: list[str] = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION} (got {data.get('apiVersion')!r})")
    if data.get("kind") != KIND:
        problems.append(f"kind: must be {KIND} (got {data.get('kind')!r})")
    extra = sorted(set(data) - {"apiVersion", "kind", "metadata", "spec", "status"})
    for key in extra:
        problems.append(f"{key}: unknown top-level field")
    meta = data.get("metadata")
    name, namespace = "", "default"
    if not isinstance(meta, dict) or not meta.get("name"):
        problems.append("metadata.name: required field is missing")
    else:
        name = str(meta["name"])
        namespace = str(meta.get("namespace") or "default")
    raw_spec = data.get("spec")
    spec: InferencePoolSpec | None = None
    if not isinstance(raw_spec, dict):
        problems.append("spec: required field is missing (or not a mapping)")
    else:
        spec, spec_problems = validate_spec(raw_spec)
        problems += [f"spec.{p}" if not p.startswith("spec") else p for p in spec_problems]
    if problems or spec is None:
        raise PoolFileError(path, problems)
    return PoolFile(
        path=path,
        name=name,
        namespace=namespace,
        spec=spec,
        config=config_from_spec(spec, name=name, namespace=namespace),
    )


def load_pool(path: str | Path) -> PoolFile:
    """Reads and validates ``path``; raises :class:`PoolFileError` listing every problem."""
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PoolFileError(shown, [f"cannot read the file: {e.strerror or e}"]) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise PoolFileError(shown, [f"not valid YAML: {e}"]) from None
    if len(docs) != 1:
        raise PoolFileError(
            shown, [f"expected exactly one {KIND} document, found {len(docs)} documents"]
        )
    return parse_pool(docs[0], shown)


__all__ = ["PoolFile", "PoolFileError", "load_pool", "parse_pool"]
