"""vLLM's engine arguments in ``spec.engine.args``: the table, the checks, the mapping.

The table (``vllm_engine_args.json``, beside this module) is generated from the installed,
pinned vLLM by ``scripts/gen_vllm_args.py``: one row per argument ``vllm serve`` takes for
its engine, keyed by the camelCase of vLLM's ``EngineArgs`` field (``maxNumBatchedTokens``
for ``--max-num-batched-tokens``), with the JSON type, choices and bounds vLLM's own
argument definitions give it. Nested configs (``speculativeConfig``, ``compilationConfig``,
...) are objects whose keys are that config class's fields, as vLLM spells them
(``num_speculative_tokens``) or in camelCase (``numSpeculativeTokens``).

:func:`problems` is the one check: the pool's validation (``preheat.api.pool``, so the
operator and ``preheat pool validate``) and the worker at start-up (``--vllm-engine-args``)
both call it, so both refuse with the same sentences, each naming the key and what is
allowed. :func:`to_vllm` maps the checked args to ``AsyncEngineArgs`` keyword arguments.

The sim engine takes the keys it models (:data:`SIM_VLLM_ARGS`): the same names, the same
checks, plus the values it can simulate.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("vllm_engine_args.json")

OWNED: Mapping[str, str] = {
    # vLLM engine args a pool may not set: Preheat sets them (and why)
    "model": "the worker serves spec.model (name and source)",
    "servedModelName": "the worker serves the model under spec.model.name",
    "seed": "the engine seed is the worker's (engine.args.seed is the sim's)",
    "enablePrefixCaching": "always on in the worker (its cache-aware routing needs it)",
    "kvEventsConfig": "the worker's own, for WatchCache",
    "disableLogStats": "always off in the worker (its /metrics)",
    "schedulingPolicy": "always priority in the worker",
}

SIM_VLLM_ARGS = (
    # vLLM args the sim engine models (besides maxNumSeqs, maxModelLen, blockSize): the
    # batching budget, FP8 weights, an FP8 KV cache, speculative decoding
    # (preheat.engine.costmodel; sim_options maps them)
    "maxNumBatchedTokens",
    "quantization",
    "kvCacheDtype",
    "speculativeConfig",
)
SIM_QUANTIZATION = ("fp8",)  # weight formats with a measured cost (engine/costmodel.py)
SIM_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
SIM_SPEC_METHODS = ("ngram", "draft_model", "eagle", "eagle3")
SIM_SPEC_KEYS = (
    # what the sim reads: the method (its draft cost), k, and the expected acceptance
    # (vLLM's synthetic_acceptance_length, or its per-position unconditional
    # synthetic_acceptance_rates: E = 1 + their sum); model and prompt_lookup_* are taken
    # and change nothing in the sim (its draft costs are the measured 1B / EAGLE head)
    "method",
    "num_speculative_tokens",
    "synthetic_acceptance_length",
    "synthetic_acceptance_rates",
    "model",
    "prompt_lookup_max",
    "prompt_lookup_min",
)


@cache
def table() -> Mapping[str, Any]:
    """The generated table: ``{"vllm": VERSION, "args": {key: row}}``."""
    data: dict[str, Any] = json.loads(TABLE_PATH.read_text())
    return data


def vllm_version() -> str:
    return str(table()["vllm"])


def rows() -> Mapping[str, Mapping[str, Any]]:
    args: Mapping[str, Mapping[str, Any]] = table()["args"]
    return args


def snake(key: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in key)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


_WANTS = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "string": "a string",
    "array": "a list",
    "object": "an object",
    "object-or-string": "an object or a string",
    "boolean-or-string": "true, false or a string",
}


def _scalar_ok(kind: str, value: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "object-or-string":
        return isinstance(value, (Mapping, str))
    if kind == "boolean-or-string":
        return isinstance(value, (bool, str))
    if kind == "array":
        return isinstance(value, list)
    return True


def _bounds_text(row: Mapping[str, Any]) -> str:
    parts = []
    if "minimum" in row:
        parts.append(f">= {row['minimum']}")
    if "exclusiveMinimum" in row:
        parts.append(f"> {row['exclusiveMinimum']}")
    if "maximum" in row:
        parts.append(f"<= {row['maximum']}")
    if "exclusiveMaximum" in row:
        parts.append(f"< {row['exclusiveMaximum']}")
    return " and ".join(parts)


def _in_bounds(row: Mapping[str, Any], value: float) -> bool:
    return not (
        ("minimum" in row and value < row["minimum"])
        or ("exclusiveMinimum" in row and value <= row["exclusiveMinimum"])
        or ("maximum" in row and value > row["maximum"])
        or ("exclusiveMaximum" in row and value >= row["exclusiveMaximum"])
    )


def _choices(values: Sequence[Any]) -> str:
    return ", ".join(str(v) for v in values)


def value_problems(path: str, row: Mapping[str, Any], value: Any) -> list[str]:
    """What is wrong with ``value`` for the argument ``row`` describes ([] when fine)."""
    kind = str(row["type"])
    if value is None:
        if row.get("nullable"):
            return []
        return [f"{path}: must be {_WANTS.get(kind, kind)}, not null"]
    if not _scalar_ok(kind, value):
        return [f"{path}: must be {_WANTS.get(kind, kind)} (got {_type_name(value)} {value!r})"]
    if "enum" in row and value not in row["enum"]:
        return [f"{path}: {value!r} is not one of {_choices(row['enum'])}"]
    if kind in ("integer", "number") and not _in_bounds(row, value):
        return [f"{path}: {value!r} is out of range; must be {_bounds_text(row)}"]
    if kind == "array":
        want = str(row.get("items", "string"))
        out = []
        for i, item in enumerate(value):
            if not _scalar_ok(want, item):
                out.append(f"{path}[{i}]: must be {_WANTS.get(want, want)} (got {item!r})")
            elif "itemEnum" in row and item not in row["itemEnum"]:
                out.append(f"{path}[{i}]: {item!r} is not one of {_choices(row['itemEnum'])}")
        return out
    if kind == "object" and "fields" in row:
        return _nested_problems(path, row["fields"], value)
    return []


def _nested_problems(path: str, fields: Mapping[str, Any], value: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key, item in value.items():
        name = snake(str(key)) if str(key) not in fields else str(key)
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(
                f"{path}.{key}: not a field of this vLLM config{hint}; it takes "
                + _choices(sorted(fields))
            )
            continue
        out += value_problems(f"{path}.{key}", fields[name], item)
    return out


def problems(
    kind: str, args: Mapping[str, Any], *, skip: tuple[str, ...] = (), prefix: str = "engine.args"
) -> list[str]:
    """Every problem with the vLLM engine args in ``args`` for engine ``kind``.

    ``skip``: keys checked elsewhere (the pool's own typed fields: maxNumSeqs, the sim's
    timeScale, ...). Every other key must be a vLLM engine argument of the pinned version,
    of the right type and in range; a few are the worker's own (:data:`OWNED`); for kind
    sim only :data:`SIM_VLLM_ARGS`, with the values the sim models.
    """
    out: list[str] = []
    table_rows = rows()
    for key in sorted(args):
        value = args[key]
        path = f"{prefix}.{key}"
        if key in skip:
            continue
        if key in OWNED:
            out.append(f"{path}: set by Preheat, not by the pool: {OWNED[key]}")
            continue
        row = table_rows.get(key)
        if row is None:
            close = difflib.get_close_matches(key, [*table_rows, *skip], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(
                f"{path}: not an engine argument of vLLM {vllm_version()}{hint}; "
                "the allowed keys are vLLM's engine flags in camelCase "
                "(--max-num-batched-tokens -> maxNumBatchedTokens), listed in docs/engine-args.md"
            )
            continue
        if kind == "sim" and key not in SIM_VLLM_ARGS:
            out.append(
                f"{path}: a vLLM argument the sim engine does not model; with engine kind sim "
                f"use {_choices([*skip, *SIM_VLLM_ARGS])}"
            )
            continue
        found = value_problems(path, row, value)
        if not found and kind == "sim":
            found = _sim_problems(path, key, value)
        out += found
    return out


def _sim_problems(path: str, key: str, value: Any) -> list[str]:
    if key == "quantization" and value is not None and value not in SIM_QUANTIZATION:
        return [f"{path}: the sim engine models {_choices(SIM_QUANTIZATION)} (got {value!r})"]
    if key == "kvCacheDtype" and value not in SIM_KV_DTYPES:
        return [f"{path}: the sim engine models {_choices(SIM_KV_DTYPES)} (got {value!r})"]
    if key == "speculativeConfig" and isinstance(value, Mapping):
        spec = {snake(str(k)): v for k, v in value.items()}
        out = [
            f"{path}.{k}: the sim engine models {_choices(SIM_SPEC_KEYS)} of speculativeConfig"
            for k in sorted(spec)
            if k not in SIM_SPEC_KEYS
        ]
        if spec.get("method") not in SIM_SPEC_METHODS:
            out.append(
                f"{path}.method: the sim engine models {_choices(SIM_SPEC_METHODS)} "
                f"(got {spec.get('method')!r})"
            )
        if not isinstance(spec.get("num_speculative_tokens"), int):
            out.append(f"{path}.num_speculative_tokens: the sim engine needs it (an integer)")
        given = [
            k for k in ("synthetic_acceptance_length", "synthetic_acceptance_rates") if k in spec
        ]
        if len(given) != 1:
            out.append(
                f"{path}: the sim engine needs the expected acceptance, one of "
                "synthetic_acceptance_length (tokens per step, 1..k+1) or "
                "synthetic_acceptance_rates (per position, non-increasing, in [0, 1])"
            )
        return out
    return []


def sim_options(args: Mapping[str, Any]) -> dict[str, Any]:
    """SimConfig options (``preheat.engine.sim``) for checked engine args of a sim pool:
    the vLLM keys it models (:data:`SIM_VLLM_ARGS`) and ``modelSize``."""
    out: dict[str, Any] = {}
    if args.get("maxNumBatchedTokens") is not None:
        out["max_num_batched_tokens"] = args["maxNumBatchedTokens"]
    if args.get("modelSize") is not None:
        out["model_size"] = args["modelSize"]
    if "quantization" in args:
        out["quantization"] = args["quantization"] or "none"
    if args.get("kvCacheDtype") is not None:
        out["kv_cache_dtype"] = args["kvCacheDtype"]
    spec = args.get("speculativeConfig")
    if isinstance(spec, Mapping):
        sc = {snake(str(k)): v for k, v in spec.items()}
        out["spec_method"] = sc.get("method")
        out["spec_tokens"] = sc.get("num_speculative_tokens")
        if sc.get("synthetic_acceptance_length") is not None:
            out["spec_acceptance_length"] = sc["synthetic_acceptance_length"]
        elif sc.get("synthetic_acceptance_rates") is not None:
            out["spec_acceptance_length"] = 1.0 + sum(sc["synthetic_acceptance_rates"])
    return out


def to_vllm(args: Mapping[str, Any]) -> dict[str, Any]:
    """``AsyncEngineArgs`` keyword arguments for checked ``args`` (camelCase -> vLLM's
    field names; nested config keys in camelCase -> vLLM's; nulls dropped)."""
    out: dict[str, Any] = {}
    table_rows = rows()
    for key, value in args.items():
        if value is None:
            continue
        row = table_rows[key]
        if row["type"] == "object" and "fields" in row and isinstance(value, Mapping):
            fields = row["fields"]
            value = {(k if k in fields else snake(k)): v for k, v in value.items()}
        out[str(row["field"])] = value
    return out


def crd_properties() -> dict[str, Any]:
    """The CRD schema's ``engine.args`` properties for every vLLM argument."""
    out: dict[str, Any] = {}
    for key, row in rows().items():
        if key in OWNED:
            continue
        kind = str(row["type"])
        prop: dict[str, Any] = {
            "description": f"vllm: {row['help']} ({row['flag']})".replace("  ", " ")
        }
        if kind in ("object-or-string", "boolean-or-string"):
            prop["x-kubernetes-preserve-unknown-fields"] = True
        elif kind == "object":
            prop["type"] = "object"
            prop["x-kubernetes-preserve-unknown-fields"] = True
        elif kind == "array":
            prop["type"] = "array"
            items: dict[str, Any] = {"type": row.get("items", "string")}
            if "itemEnum" in row:
                items["enum"] = list(row["itemEnum"])
            prop["items"] = items
        else:
            prop["type"] = kind
            if "enum" in row:
                prop["enum"] = list(row["enum"])
            for b in ("minimum", "maximum"):
                if b in row:
                    prop[b] = row[b]
            for b, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                if b in row:
                    prop[plain], prop[b] = row[b], True
        out[key] = dict(sorted(prop.items()))
    return out


def _allowed_text(row: Mapping[str, Any]) -> str:
    kind = str(row["type"])
    parts = [_WANTS.get(kind, kind)]
    if "enum" in row:
        parts = ["one of " + ", ".join(f"`{v}`" for v in row["enum"])]
    if "itemEnum" in row:
        parts.append("items one of " + ", ".join(f"`{v}`" for v in row["itemEnum"]))
    bounds = _bounds_text(row)
    if bounds:
        parts.append(bounds)
    if "config" in row:
        parts.append(f"vLLM's `{row['config']}` fields")
    return "; ".join(parts)


def docs_markdown() -> str:
    """``docs/engine-args.md``: every key of the table, written by ``scripts/gen_crd.py``."""
    lines = [
        "<!-- Generated by scripts/gen_crd.py from src/preheat/api/vllm_engine_args.json "
        "(scripts/gen_vllm_args.py). Do not edit. -->",
        "",
        f"# Engine arguments (vLLM {vllm_version()})",
        "",
        "A pool's `spec.engine.args` takes Preheat's own keys (`maxNumSeqs`, `maxModelLen`, "
        "`blockSize`, `gpuMemoryUtilization`, `dtype`, `enforceEager`, `tensorParallelSize`; "
        "for the sim `numGpuBlocks`, `timeScale`, `loadTime`, `warmupTime`, `seed`, `modelSize`) "
        "and every "
        "engine argument of the pinned vLLM below, in camelCase (`--max-num-batched-tokens` "
        "-> `maxNumBatchedTokens`). Nested configs are objects whose keys are the config "
        "class's fields, as vLLM spells them (`num_speculative_tokens`) or in camelCase. The "
        "operator (and `preheat pool validate`) refuses an unknown key, a wrong type or an "
        "out-of-range value, listing every problem; the worker checks the same table before it "
        "starts. The table is read from the installed vLLM by `scripts/gen_vllm_args.py`.",
        "",
        "Set by Preheat, refused in a pool: "
        + "; ".join(f"`{k}` ({why})" for k, why in OWNED.items())
        + ".",
        "",
        "The sim engine (`engine.kind: sim`) takes, of these, "
        + ", ".join(f"`{k}`" for k in SIM_VLLM_ARGS)
        + ".",
        "",
        "| key | vLLM flag | allowed | what |",
        "| --- | --- | --- | --- |",
    ]
    for key, row in rows().items():
        if key in OWNED:
            continue
        what = str(row["help"]).replace("|", "\\|")
        allowed = _allowed_text(row).replace("|", "\\|")
        lines.append(f"| `{key}` | `{row['flag']}` | {allowed} | {what} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "OWNED",
    "SIM_VLLM_ARGS",
    "crd_properties",
    "docs_markdown",
    "problems",
    "rows",
    "sim_options",
    "snake",
    "table",
    "to_vllm",
    "value_problems",
    "vllm_version",
]
