"""Writes the table of vLLM's engine arguments, read from the installed vLLM, for
``spec.engine.args`` (``src/preheat/api/vllm_engine_args.json``).

    .venv-vllm/bin/python scripts/gen_vllm_args.py           # write the table
    .venv-vllm/bin/python scripts/gen_vllm_args.py --check   # exit 1 if it differs

Run it with the Python that has the pinned vLLM (``scripts/setup_vllm_venv.sh``); it imports
only vLLM, not Preheat. Every argument ``vllm serve`` takes for its engine
(``EngineArgs.add_cli_args``, each one an ``EngineArgs`` field) becomes one row: its pool
key (camelCase of the field), its ``vllm serve`` flag, the JSON type it takes (from the
field's type hint, classified the way vLLM's own ``get_kwargs`` does), its choices (a
``Literal`` hint), its bounds (the ``Field(ge=.., gt=.., le=.., lt=..)`` constraints of the
config class the argument comes from: ``CacheConfig``, ``SchedulerConfig``, ...), whether
``null`` is allowed, and the first sentence of its help. An argument whose value is one of
vLLM's config dataclasses (``compilationConfig``, ``speculativeConfig``, ...) is an object,
and the table lists that class's own fields, typed the same way, one level deep.

The table is checked in, so the CRD (``make crd``), the operator, ``preheat pool
validate`` and the worker read the same rows without vLLM installed; the vLLM tier
regenerates it and compares (``tests/vllm_tier/test_vllm_engine_args.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "src" / "preheat" / "api" / "vllm_engine_args.json"

# EngineArgs fields whose value vLLM parses as JSON into one of its config classes, though
# the field's hint says dict (vLLM delays the pydantic validation: arg_utils.py)
NESTED_AS = {
    "speculative_config": "SpeculativeConfig",
    "watermark_config": "WatermarkConfig",
    "diffusion_config": "DiffusionConfig",
}

# string arguments whose allowed values vLLM lists at runtime, not in the field's hint
# (arg_utils.py types quantization as str outside TYPE_CHECKING); its ModelConfig refuses
# any other value when the engine is built
ENUM_FROM = {"quantization": ("vllm.model_executor.layers.quantization", "QUANTIZATION_METHODS")}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _hints(hint: Any) -> list[Any]:
    origin = get_origin(hint)
    if origin is typing.Annotated:
        return _hints(get_args(hint)[0])
    if origin in (Union, types.UnionType):
        out: list[Any] = []
        for a in get_args(hint):
            out += _hints(a)
        return out
    return [hint]


def _is(hint: Any, kind: Any) -> bool:
    return hint is kind or get_origin(hint) is kind


def _scalar(t: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(t, "string")


def _classify(hint: Any) -> dict[str, Any]:
    """The JSON type of a field with this type hint (as vLLM's get_kwargs branches)."""
    hs = _hints(hint)
    nullable = type(None) in hs
    hs = [h for h in hs if h is not type(None)]
    hs = [dict if isinstance(h, type) and issubclass(h, dict) else h for h in hs]
    row: dict[str, Any] = {"nullable": nullable}
    dc = next((h for h in hs if dataclasses.is_dataclass(h)), None)
    if dc is not None:
        row["type"] = "object"
        row["config"] = dc.__name__
        row["_cls"] = dc
    elif set(hs) == {bool, str}:
        row["type"] = "boolean-or-string"
    elif any(_is(h, bool) for h in hs):
        row["type"] = "boolean"
    elif any(_is(h, Literal) for h in hs):
        lit = next(h for h in hs if _is(h, Literal))
        options = list(get_args(lit))
        row["type"] = _scalar(type(options[0]))
        row["enum"] = sorted(options, key=str)
        if any(_is(h, str) for h in hs):
            row["enumFrom"] = "Literal"  # vLLM's hint also allows str: the named ones here
    elif any(_is(h, c) for h in hs for c in (list, tuple, set)):
        coll = next(h for h in hs if any(_is(h, c) for c in (list, tuple, set)))
        elems = [a for a in get_args(coll) if a is not Ellipsis]
        elem = elems[0] if elems else str
        elem_hs = [e for e in _hints(elem) if e is not type(None)]
        row["type"] = "array"
        row["items"] = _scalar(elem_hs[0]) if len(elem_hs) == 1 else "string"
        if len(elem_hs) == 1 and _is(elem_hs[0], Literal):
            row["items"] = _scalar(type(get_args(elem_hs[0])[0]))
            row["itemEnum"] = sorted(get_args(elem_hs[0]), key=str)
    elif any(_is(h, int) for h in hs):
        row["type"] = "integer"
    elif any(_is(h, float) for h in hs):
        row["type"] = "number"
    elif any(_is(h, dict) for h in hs) and any(
        _is(h, str) or getattr(h, "__module__", "builtins") != "builtins" for h in hs
    ):
        row["type"] = "object-or-string"
    elif any(_is(h, dict) for h in hs):
        row["type"] = "object"
    else:
        row["type"] = "string"
    return row


def _bounds(config_classes: list[Any], name: str) -> dict[str, Any]:
    """``Field(ge/gt/le/lt)`` of ``name`` in the first config class that has it."""
    for cls in config_classes:
        fields = getattr(cls, "__pydantic_fields__", {})
        info = fields.get(name)
        if info is None:
            continue
        out: dict[str, Any] = {}
        for m in info.metadata:
            for attr, key in (
                ("ge", "minimum"),
                ("gt", "exclusiveMinimum"),
                ("le", "maximum"),
                ("lt", "exclusiveMaximum"),
            ):
                v = getattr(m, attr, None)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[key] = v
        return out
    return {}


def _first_sentence(text: str) -> str:
    text = " ".join((text or "").replace("%%", "%").split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    s = m.group(1) if m else text
    return s if len(s) <= 200 else s[:197] + "..."


def _nested(cls: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        row = _classify(f.type)  # the hint object, as vLLM's get_kwargs reads it
        row.pop("_cls", None)
        row.update(_bounds([cls], f.name))
        out[f.name] = row
    return dict(sorted(out.items()))


def build() -> dict[str, Any]:
    sys.argv = [sys.argv[0], "--help"]  # vLLM reads its attribute docs for help only then
    import vllm
    import vllm.config as vc
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    fields = {f.name: f for f in dataclasses.fields(EngineArgs)}
    config_classes = [
        v
        for k, v in sorted(vars(vc).items())
        if isinstance(v, type) and k.endswith("Config") and hasattr(v, "__pydantic_fields__")
    ]
    args: dict[str, Any] = {}
    for action in parser._actions:
        dest = action.dest
        if dest not in fields or not action.option_strings:
            continue
        flag = next(
            (o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")),
            action.option_strings[0],
        )
        if flag != "--" + dest.replace("_", "-"):
            continue  # an alias (--spec-tokens): the canonical flag has the row
        row = _classify(fields[dest].type)
        if dest in NESTED_AS:
            row.update(type="object", config=NESTED_AS[dest], _cls=getattr(vc, NESTED_AS[dest]))
        row.update(_bounds(config_classes, dest))
        if dest in ENUM_FROM:
            module, name = ENUM_FROM[dest]
            row["enum"] = sorted(getattr(importlib.import_module(module), name))
        if "config" in row:
            row["fields"] = _nested(row["_cls"])
        row.pop("_cls", None)
        row["field"] = dest
        row["flag"] = flag
        row["help"] = _first_sentence(action.help or "")
        args[camel(dest)] = dict(sorted(row.items()))
    return {
        "generatedBy": "scripts/gen_vllm_args.py",
        "vllm": vllm.__version__,
        "args": dict(sorted(args.items())),
    }


def render() -> str:
    return json.dumps(build(), indent=1, sort_keys=False, default=str) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if the table is stale")
    p.add_argument("--out", type=Path, default=TARGET)
    a = p.parse_args(argv)
    text = render()
    if a.check:
        if not a.out.exists() or a.out.read_text() != text:
            print(f"{a.out} is stale: run scripts/gen_vllm_args.py", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
