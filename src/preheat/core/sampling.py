"""The sampling parameters beyond max_tokens, temperature, top_p, stop and seed: what a
request asks of the engine's sampler (penalties, biases, stop token ids, log probabilities,
a structured-output constraint), their bounds, and which of them change anything.

:class:`SamplingOptions` mirrors the proto's ``SamplingParams`` fields 6-17 with "unset"
kept apart from a value (``None``), so an engine can tell a no-op (``presence_penalty: 0``)
from a request it cannot honour. :func:`options_problems` gives every out-of-bounds value
as a sentence naming the field (the bounds are vLLM's and OpenAI's, so a request valid here
is valid there); :func:`effective_fields` names the fields whose values change the output,
which an engine that does not honour them refuses by name.

No I/O, no wire types: ``preheat.wire.convert`` builds these from a ``GenerateRequest``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

PENALTY_MIN, PENALTY_MAX = -2.0, 2.0
LOGIT_BIAS_MIN, LOGIT_BIAS_MAX = -100.0, 100.0
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
MAX_STOP_TOKEN_IDS = 64
MAX_LOGPROBS = 20  # OpenAI's top_logprobs bound and vLLM's default max_logprobs
MAX_CONSTRAINT_CHARS = 64 * 1024  # a schema, regex or grammar; all choices together
MAX_CHOICES = 256


@dataclass(frozen=True)
class StructuredOutput:
    """One constraint on the output text (exactly one field set; vLLM's
    ``StructuredOutputsParams``)."""

    json_schema: str | None = None  # the schema as JSON text
    json_object: bool = False  # any JSON object
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None  # EBNF

    @property
    def kind(self) -> str:
        """The name of the field that is set ("" when none is)."""
        for name in ("json_schema", "regex", "choice", "grammar"):
            if getattr(self, name) is not None:
                return name
        return "json_object" if self.json_object else ""


@dataclass(frozen=True)
class SamplingOptions:
    """Sampling parameters as requested; ``None`` (or empty, or 0 for ``top_k`` and
    ``min_tokens``) means unset: the engine's default, which changes nothing."""

    top_k: int = 0
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), sorted by id
    stop_token_ids: tuple[int, ...] = ()
    min_tokens: int = 0
    logprobs: int | None = None  # alternatives per generated token (0: the sampled only)
    prompt_logprobs: int | None = None
    structured_output: StructuredOutput | None = None


NO_OPTIONS = SamplingOptions()
"""Every option unset (shared: a request that sets none costs no allocation or check)."""


def effective_fields(o: SamplingOptions) -> list[str]:
    """The ``sampling.*`` fields of ``o`` whose values change the output or the response
    (a zero penalty, a repetition penalty of 1 or an empty bias change nothing)."""
    if o is NO_OPTIONS:
        return []
    out: list[str] = []
    if o.top_k > 0:
        out.append("top_k")
    if o.min_p is not None and o.min_p != 0.0:
        out.append("min_p")
    if o.presence_penalty is not None and o.presence_penalty != 0.0:
        out.append("presence_penalty")
    if o.frequency_penalty is not None and o.frequency_penalty != 0.0:
        out.append("frequency_penalty")
    if o.repetition_penalty is not None and o.repetition_penalty != 1.0:
        out.append("repetition_penalty")
    if any(b != 0.0 for _, b in o.logit_bias):
        out.append("logit_bias")
    if o.stop_token_ids:
        out.append("stop_token_ids")
    if o.min_tokens > 0:
        out.append("min_tokens")
    if o.logprobs is not None:
        out.append("logprobs")
    if o.prompt_logprobs is not None:
        out.append("prompt_logprobs")
    if o.structured_output is not None:
        out.append("structured_output")
    return ["sampling." + f for f in out]


def options_problems(o: SamplingOptions, max_tokens: int, vocab_size: int | None) -> list[str]:
    """Every out-of-bounds value of ``o``, as sentences naming the field; empty when fine."""
    if o is NO_OPTIONS:
        return []
    problems: list[str] = []

    def in_range(name: str, v: float | None, lo: float, hi: float, shown: str) -> None:
        if v is not None and not (math.isfinite(v) and lo <= v <= hi):
            problems.append(f"sampling.{name} must be in {shown}, got {v:g}")

    in_range("min_p", o.min_p, 0.0, 1.0, "[0, 1]")
    in_range("presence_penalty", o.presence_penalty, PENALTY_MIN, PENALTY_MAX, "[-2, 2]")
    in_range("frequency_penalty", o.frequency_penalty, PENALTY_MIN, PENALTY_MAX, "[-2, 2]")
    rp = o.repetition_penalty
    if rp is not None and not (math.isfinite(rp) and rp > 0.0):
        problems.append(f"sampling.repetition_penalty must be a number > 0, got {rp:g}")
    if vocab_size is not None and o.top_k > vocab_size:
        problems.append(
            f"sampling.top_k must be at most the vocabulary size {vocab_size}, got {o.top_k}"
        )

    if len(o.logit_bias) > MAX_LOGIT_BIAS:
        problems.append(
            f"sampling.logit_bias has {len(o.logit_bias)} entries; at most {MAX_LOGIT_BIAS}"
        )
    bad_bias = [b for _, b in o.logit_bias if not LOGIT_BIAS_MIN <= b <= LOGIT_BIAS_MAX]
    if bad_bias:
        problems.append(
            f"sampling.logit_bias values must be in [-100, 100]; {len(bad_bias)} are not "
            f"(e.g. {bad_bias[0]:g})"
        )
    _ids_problem(problems, "logit_bias", [t for t, _ in o.logit_bias], vocab_size)

    if len(o.stop_token_ids) > MAX_STOP_TOKEN_IDS:
        problems.append(
            f"sampling.stop_token_ids has {len(o.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS}"
        )
    _ids_problem(problems, "stop_token_ids", o.stop_token_ids, vocab_size)

    if max_tokens > 0 and o.min_tokens > max_tokens:
        problems.append(
            f"sampling.min_tokens ({o.min_tokens}) must be at most max_tokens ({max_tokens})"
        )
    for name, n in (("logprobs", o.logprobs), ("prompt_logprobs", o.prompt_logprobs)):
        if n is not None and not 0 <= n <= MAX_LOGPROBS:
            problems.append(f"sampling.{name} must be in [0, {MAX_LOGPROBS}], got {n}")

    if o.structured_output is not None:
        problems.extend(structured_output_problems(o.structured_output))
    return problems


def structured_output_problems(so: StructuredOutput) -> list[str]:
    """What is wrong with one constraint (none set, an unparsable schema, sizes)."""
    kind = so.kind
    where = f"sampling.structured_output.{kind}"
    if not kind:
        return [
            "sampling.structured_output is set but names no constraint: set one of "
            "json_schema, json_object, regex, choice, grammar"
        ]
    if kind == "json_object":
        return []
    if kind == "choice":
        choices = so.choice or ()
        if not choices:
            return [f"{where} is empty: give at least one option"]
        if len(choices) > MAX_CHOICES:
            return [f"{where} has {len(choices)} options; at most {MAX_CHOICES}"]
        size = sum(len(c) for c in choices)
    else:
        text = getattr(so, kind) or ""
        if not text:
            return [f"{where} is empty"]
        size = len(text)
    if size > MAX_CONSTRAINT_CHARS:
        return [f"{where} has {size} characters; at most {MAX_CONSTRAINT_CHARS}"]
    if kind == "json_schema":
        try:
            schema = json.loads(so.json_schema or "")
        except ValueError as e:
            return [f"{where} is not valid JSON: {e}"]
        if not isinstance(schema, dict | bool):
            return [f"{where} must be a JSON object (a schema), got {type(schema).__name__}"]
    return []


def _ids_problem(
    problems: list[str], name: str, ids: Sequence[int], vocab_size: int | None
) -> None:
    if vocab_size is None:
        return
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        shown = ", ".join(str(t) for t in bad[:5]) + (", ..." if len(bad) > 5 else "")
        problems.append(
            f"sampling.{name} has {len(bad)} token id(s) outside the vocabulary of "
            f"{vocab_size} tokens: {shown}"
        )
