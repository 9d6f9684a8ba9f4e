"""Every ``preheat.…`` name that the docs, the READMEs and the source's docstrings cite, and
every ``from preheat… import …`` in them, names something that exists: a module or
symbol that moves or is renamed takes its citations with it (issue 14)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_DOTTED = re.compile(r"(?<![\w./-])preheat(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"^[ \t]*from (preheat(?:\.\w+)*) import ([\w, ]+)$", re.M)
_NOT_PYTHON = ("preheat.v1", "preheat.dev", "preheat.io")  # proto package, API group, domain


def _files() -> list[Path]:
    """The docs and READMEs (``*.md`` outside the virtualenvs and caches), the source and
    the scripts."""
    found = set(ROOT.glob("*.md"))
    for top in ("docs", "src", "scripts", "worker", "router", "operator", "charts", "e2e"):
        for pattern in ("*.md", "*.py"):
            found.update((ROOT / top).rglob(pattern))
    proto = ROOT / "src" / "preheat" / "proto"
    return sorted(p for p in found if proto not in p.parents)


def resolves(name: str) -> bool:
    """True when ``name`` is an importable module or an attribute path below one (a module
    that needs an optional dependency, e.g. vLLM, counts as existing)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] != "preheat":
                return True
            continue
        except ImportError:
            return True
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def cited(text: str) -> set[str]:
    names = {m.group(0).rstrip(".") for m in _DOTTED.finditer(text)}
    for m in _FROM_IMPORT.finditer(text):
        for item in m.group(2).split(","):
            if item.strip():
                names.add(f"{m.group(1)}.{item.split(' as ')[0].strip()}")
    return {n for n in names if not n.startswith(_NOT_PYTHON)}


def test_every_cited_name_exists() -> None:
    stale = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _files()
        for name in sorted(cited(path.read_text(encoding="utf-8")))
        if not resolves(name)
    ]
    assert stale == []


def test_a_stale_citation_is_found() -> None:
    text = (
        "see :func:`preheat.core.routing.schedule` and ``preheat.workload.traces.load_trace``\n"
        "    from preheat.simulate import SimOptions, no_such_name as x\n"
    )
    assert sorted(n for n in cited(text) if not resolves(n)) == [
        "preheat.core.routing.schedule",
        "preheat.simulate.no_such_name",
    ]
