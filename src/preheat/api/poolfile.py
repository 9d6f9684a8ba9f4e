"""The one reader of ``InferencePool`` files, for ``preheat up`` and ``preheat simulate``.

A pool file is the whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``), as for
``kubectl apply -f``; the spec is validated by :func:`preheat.api.pool.validate_spec` (the
CRD's own rules, which the operator runs on the specs it gets from the API server too).
Reading takes two steps so that ``preheat simulate`` can edit the spec in between:

1. :func:`read_document` (bytes or a path -> :class:`PoolDocument`): decoding (UTF-8),
   YAML, exactly one document, and the top-level fields. Problems are collected, not raised,
   except when there is nothing to go on (unreadable, not UTF-8, not YAML, not a mapping).
2. :func:`validate_document` (:class:`PoolDocument` -> :class:`PoolFile`): the document's
   problems, every field's own problems and the cross-field rules (``replicas.min <=
   replicas.max`` and the others, checked even when other fields are wrong), all at once.

:func:`load_pool` does both. Every problem is a sentence that starts with its field path
(``spec.replicas.min: ...``), and they all come in one :class:`PoolFileError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from preheat.api.pool import InferencePoolSpec, config_from_spec, validate_spec
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.manifests import API_VERSION, KIND, pool_name_problem
from preheat.core.pool import PoolConfig
from preheat.process import yamlfile

TOP_LEVEL_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_SPEC_KEYS = frozenset(
    key for name, f in InferencePoolSpec.model_fields.items() for key in (name, f.alias or name)
)
# Kubernetes object names (and namespaces) are DNS-1123 subdomains (labels for namespaces).
NAME_PATTERN = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
NAME_MAX = 253
NAMESPACE_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NAMESPACE_MAX = 63


class PoolFileError(PreheatError):
    """An unusable pool file; ``problems`` has one sentence per problem, each starting with
    the field path it is about (none for problems with the file as a whole)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(ErrorCode.INVALID_ARGUMENT, self.describe())

    def describe(self, consequence: str = "") -> str:
        """``SOURCE: N problems[; CONSEQUENCE]:`` and one indented line per problem."""
        n = len(self.problems)
        head = f"{self.source}: {n} problem{'s' if n != 1 else ''}"
        if consequence:
            head += f"; {consequence}"
        return head + ":\n" + "\n".join(f"  - {p}" for p in self.problems)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class PoolDocument:
    """A decoded pool file before its spec is validated."""

    source: str  # the path (or what the caller calls the input), for messages
    name: str
    namespace: str
    spec: Mapping[str, Any] | None  # the raw spec (camelCase); None: missing or not a mapping
    problems: tuple[str, ...] = field(default=())  # with the file and its top-level fields


@dataclass(frozen=True)
class PoolFile:
    """A valid pool file."""

    path: str
    name: str
    namespace: str
    spec: InferencePoolSpec
    config: PoolConfig


def _decode(data: bytes, source: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PoolFileError(
            source,
            [f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} (line {line})"],
        ) from None
    try:
        docs = [d for d in yamlfile.load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise PoolFileError(source, [f"not valid YAML: {e}"]) from None
    if len(docs) != 1:
        raise PoolFileError(
            source, [f"expected exactly one {KIND} document, found {len(docs)} documents"]
        )
    doc = docs[0]
    if not isinstance(doc, dict):
        raise PoolFileError(
            source,
            [
                f"expected an {KIND} object (apiVersion, kind, metadata, spec), "
                f"got a YAML {type(doc).__name__}"
            ],
        )
    return doc


def _name_problem(path: str, value: Any, pattern: str, limit: int) -> str:
    """ "" when ``value`` is a Kubernetes name, else the problem."""
    if not isinstance(value, str):
        return f"{path}: must be a string (got a YAML {type(value).__name__}: {value!r:.60})"
    if len(value) > limit or not re.fullmatch(pattern, value):
        return (
            f"{path}: {value[:80]!r} is not a Kubernetes name (lowercase letters, digits and "
            f"'-', starting and ending with a letter or digit, at most {limit} characters)"
        )
    return ""


def document_from_object(
    data: Mapping[str, Any], source: str, *, bare_spec_name: str = ""
) -> PoolDocument:
    """The top-level fields of a decoded pool object, their problems collected.

    With ``bare_spec_name``, a mapping that has none of the top-level fields but some field
    of a spec is taken as a bare spec of a pool of that name (``preheat simulate`` accepts
    one); anything else is read as a whole object, with the same messages as without.
    """
    if bare_spec_name and not set(data) & set(TOP_LEVEL_FIELDS) and set(data) & _SPEC_KEYS:
        return PoolDocument(source, bare_spec_name, "default", dict(data))
    problems: list[str] = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: must be {API_VERSION} (got {data.get('apiVersion')!r:.60})")
    if data.get("kind") != KIND:
        problems.append(f"kind: must be {KIND} (got {data.get('kind')!r:.60})")
    for key in sorted((str(k) for k in data if k not in TOP_LEVEL_FIELDS), key=str):
        problems.append(f"{key}: unknown top-level field")
    name, namespace = "", "default"
    meta = data.get("metadata")
    if meta is None or (isinstance(meta, Mapping) and meta.get("name") is None):
        problems.append("metadata.name: required field is missing")
    elif not isinstance(meta, Mapping):
        problems.append(f"metadata: must be a mapping (got a YAML {type(meta).__name__})")
    else:
        bad = _name_problem("metadata.name", meta["name"], NAME_PATTERN, NAME_MAX)
        if not bad:
            derived = pool_name_problem(meta["name"])
            bad = f"metadata.name: {derived}" if derived else ""
        if bad:
            problems.append(bad)
        else:
            name = meta["name"]
        ns = meta.get("namespace")
        if ns is not None:
            bad = _name_problem("metadata.namespace", ns, NAMESPACE_PATTERN, NAMESPACE_MAX)
            if bad:
                problems.append(bad)
            else:
                namespace = ns
    spec = data.get("spec")
    if spec is None:
        problems.append("spec: required field is missing")
    elif not isinstance(spec, Mapping):
        problems.append(f"spec: must be a mapping (got a YAML {type(spec).__name__})")
        spec = None
    return PoolDocument(source, name, namespace, spec, tuple(problems))


def read_document(
    data: bytes | str | Path, *, source: str = "", bare_spec: bool = False
) -> PoolDocument:
    """A pool file's document: ``data`` is the file's bytes, or a path (``str``/``Path``).

    Raises :class:`PoolFileError` only when there is nothing to go on (the file cannot be
    read, is not UTF-8 or YAML, or is not one mapping); other problems are collected in
    :attr:`PoolDocument.problems`. ``bare_spec``: a file with no top-level field is a spec
    (its pool named after the file).
    """
    if isinstance(data, bytes):
        shown = source or "<pool file>"
        stem = Path(source).stem if source else "pool"
    else:
        shown = source or str(data)
        stem = Path(data).stem
        try:
            data = Path(data).read_bytes()
        except OSError as e:
            raise PoolFileError(shown, [f"cannot read the file: {e.strerror or e}"]) from None
    doc = _decode(data, shown)
    return document_from_object(doc, shown, bare_spec_name=stem if bare_spec else "")


def validate_document(doc: PoolDocument, *, spec: Mapping[str, Any] | None = None) -> PoolFile:
    """The valid pool of ``doc`` (with ``spec`` in place of its own, when given); raises
    :class:`PoolFileError` listing the document's problems and every problem of its spec
    (none when the document has no spec to validate)."""
    parsed: InferencePoolSpec | None = None
    spec_problems: list[str] = []
    if doc.spec is not None:
        parsed, spec_problems = validate_spec(doc.spec if spec is None else spec)
    problems = [*doc.problems, *(f"spec.{p}" for p in spec_problems)]
    if problems or parsed is None:
        raise PoolFileError(doc.source, problems or ["spec: not valid"])
    return PoolFile(
        path=doc.source,
        name=doc.name,
        namespace=doc.namespace,
        spec=parsed,
        config=config_from_spec(parsed, name=doc.name, namespace=doc.namespace),
    )


def parse_pool(data: Any, source: str) -> PoolFile:
    """A pool from a decoded YAML object; raises :class:`PoolFileError` listing every
    problem."""
    if not isinstance(data, Mapping):
        raise PoolFileError(
            source,
            [
                f"expected an {KIND} object (apiVersion, kind, metadata, spec), "
                f"got a YAML {type(data).__name__}"
            ],
        )
    return validate_document(document_from_object(data, source))


def load_pool(data: bytes | str | Path, *, source: str = "") -> PoolFile:
    """Reads and validates a pool file (its bytes, or a path); raises :class:`PoolFileError`
    listing every problem."""
    return validate_document(read_document(data, source=source))


def with_source(doc: PoolDocument, source: str) -> PoolDocument:
    """``doc`` under another name in messages (e.g. naming the overrides applied to it)."""
    return replace(doc, source=source)


__all__ = [
    "PoolDocument",
    "PoolFile",
    "PoolFileError",
    "document_from_object",
    "load_pool",
    "parse_pool",
    "read_document",
    "validate_document",
    "with_source",
]
