"""YAML as the files a user or an attacker gives us are read: ``yaml.safe_load``, bounded.

``yaml.safe_load`` builds an alias (``*name``) as a reference to its anchor's value, so a
file of a few hundred bytes can stand for billions of values (the "billion laughs": nine
lists of nine aliases of the list before). Nothing is expanded while loading; whatever
walks the result next is: a pool file of 1 KB took 10 GB and a minute under ``preheat up``
before it was killed, validating ``metadata.labels`` nine levels deep. And an alias inside
its own anchor (``&a [*a]``) loads as a cyclic list that a validator recurses into forever.

:func:`load` and :func:`load_all` compose the document first, count the values it expands
to (each alias counted as a copy of what it names, every node counted once per use) and
refuse, with :class:`YamlTooLarge` (a ``yaml.YAMLError``, so every reader's existing
handler reports it), a document over :data:`MAX_VALUES` or with a cycle, before anything
is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

__all__ = ["MAX_VALUES", "YamlTooLarge", "load", "load_all"]

#: the most values (scalars, lists and mappings, aliases expanded) one document may stand
#: for: a pool file has hundreds, a routing file with every pool's endpoints thousands
MAX_VALUES = 1_000_000


class YamlTooLarge(yaml.YAMLError):
    """A document that expands past :data:`MAX_VALUES` values or refers to itself."""


def load(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing a document that expands too far (see the module)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlTooLarge("the document is nested too deep to read") from None
    finally:
        loader.dispose()


def load_all(text: str) -> Iterator[Any]:
    """``yaml.safe_load_all(text)``, each document bounded as :func:`load` bounds one."""
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            try:
                node = loader.get_node()
                if node is not None:
                    _check(node)
                document = None if node is None else loader.construct_document(node)
            except RecursionError:
                raise YamlTooLarge("a document is nested too deep to read") from None
            yield document
    finally:
        loader.dispose()


def _check(root: yaml.Node) -> None:
    sizes: dict[int, int] = {}  # a node's expanded size, once known (aliases share nodes)
    open_: set[int] = set()  # nodes being counted: meeting one again is a cycle

    def size(node: yaml.Node) -> int:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if key in open_:
            raise YamlTooLarge(f"{_where(node)}: an alias refers to its own anchor (a cycle)")
        open_.add(key)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                n += size(child)
                _bound(n, node)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                n += size(k) + size(v)
                _bound(n, node)
        open_.discard(key)
        sizes[key] = n
        return n

    size(root)


def _bound(n: int, node: yaml.Node) -> None:
    if n > MAX_VALUES:
        raise YamlTooLarge(
            f"{_where(node)}: the document expands to more than {MAX_VALUES:,} values "
            "through its aliases (*name); refused before it is built"
        )


def _where(node: yaml.Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}" if mark is not None else "the document"
