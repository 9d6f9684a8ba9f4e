"""The router scheduler's external config: camelCase YAML/JSON -> validated -> frozen
:class:`~preheat.core.routing.config.SchedulerConfig`.

Example (every key optional; the defaults are the ``preheat`` policy)::

    policy: preheat
    scorers:
      - {name: queue, weight: 1}
      - {name: prefix, weight: 1}
      - {name: rtt, weight: 1}
      - {name: kv-pressure, weight: 1}
      - {name: session, weight: 1}
      - {name: decode-interference, weight: 0.05}
    filters: [same-pool, fresh]
    stalenessSeconds: 5
    hotspotMarginMs: 150
    sessionLoadBound: 1.25

:func:`load_routing_config` reports every problem at once in one
``PreheatError(INVALID_ARGUMENT)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing.config import DEFAULT_FILTERS, DEFAULT_SCORERS, SchedulerConfig
from preheat.core.routing.plugins.registry import FILTERS, SCORERS
from preheat.core.routing.scheduler import POLICIES
from preheat.process import yamlfile

_D = SchedulerConfig()


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ScorerSpec(_Spec):
    """One scorer enabled with a weight (its ms are multiplied by it)."""

    name: str
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in SCORERS:
            raise ValueError(f"unknown scorer {v!r}; known scorers: {', '.join(SCORERS)}")
        return v


def _ms(default: float) -> Any:
    return Field(default=default, ge=0.0, allow_inf_nan=False)


class RoutingConfigSpec(_Spec):
    """The external schema; field names are camelCase in YAML/JSON (see module doc)."""

    policy: str = _D.policy
    scorers: list[ScorerSpec] = Field(
        default_factory=lambda: [ScorerSpec(name=n, weight=w) for n, w in DEFAULT_SCORERS]
    )
    filters: list[str] = Field(default_factory=lambda: list(DEFAULT_FILTERS))
    staleness_seconds: float = Field(default=_D.staleness_s, gt=0.0, allow_inf_nan=False)
    stale_penalty_ms: float = _ms(_D.stale_penalty_ms)
    hotspot_margin_ms: float = _ms(_D.hotspot_margin_ms)
    session_load_bound: float = Field(default=_D.session_load_bound, ge=1.0, allow_inf_nan=False)
    session_load_floor: int = Field(default=_D.session_load_floor, ge=1)
    default_rtt_ms: float = _ms(_D.default_rtt_ms)
    cross_zone_rtt_ms: float = _ms(_D.cross_zone_rtt_ms)
    remote_region_rtt_ms: float = _ms(_D.remote_region_rtt_ms)
    rtt_deadband_ms: float = _ms(_D.rtt_deadband_ms)
    tie_margin_ms: float = _ms(_D.tie_margin_ms)
    steer_budget_ms: float | None = Field(default=_D.steer_budget_ms, ge=0.0, allow_inf_nan=False)
    typical_prompt_tokens: int = Field(default=_D.typical_prompt_tokens, ge=1)
    typical_prompt_alpha: float = Field(
        default=_D.typical_prompt_alpha, ge=0.0, le=1.0, allow_inf_nan=False
    )
    running_seq_ms: float = _ms(_D.running_seq_ms)
    step_residual: float = Field(default=_D.step_residual, ge=0.0, le=1.0, allow_inf_nan=False)
    step_clock: bool = _D.step_clock
    slot_wait_ms: float = _ms(_D.slot_wait_ms)
    chunk_tokens: int = Field(default=_D.chunk_tokens, ge=1, le=1 << 20)
    chunk_shared_ms: float = _ms(_D.chunk_shared_ms)
    decode_seq_ms: float = _ms(_D.decode_seq_ms)
    decode_kv_ms_per_token: float = _ms(_D.decode_kv_ms_per_token)
    typical_output_tokens: int = Field(default=_D.typical_output_tokens, ge=0, le=1 << 20)
    kv_pressure_threshold: float = Field(
        default=_D.kv_pressure_threshold, ge=0.0, lt=1.0, allow_inf_nan=False
    )
    kv_pressure_max_ms: float = _ms(_D.kv_pressure_max_ms)
    pool: str = _D.pool
    chwbl_prefix_blocks: int = Field(default=_D.chwbl_prefix_blocks, ge=1)
    chwbl_virtual_nodes: int = Field(default=_D.chwbl_virtual_nodes, ge=1, le=4096)
    ttft_error_half_life_seconds: float = _ms(_D.ttft_error_half_life_s)
    min_retry_after_seconds: float = _ms(_D.min_retry_after_s)
    no_endpoints_retry_after_seconds: float = _ms(_D.no_endpoints_retry_after_s)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in POLICIES:
            raise ValueError(f"unknown policy {v!r}; known policies: {', '.join(POLICIES)}")
        return v

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in FILTERS]
        if unknown:
            raise ValueError(
                f"unknown filter(s) {', '.join(map(repr, unknown))}; "
                f"known filters: {', '.join(FILTERS)}"
            )
        if len(set(v)) != len(v):
            raise ValueError("a filter is listed more than once")
        return v

    @field_validator("scorers")
    @classmethod
    def _unique_scorers(cls, v: list[ScorerSpec]) -> list[ScorerSpec]:
        names = [s.name for s in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"scorer(s) listed more than once: {', '.join(dup)}")
        return v

    def to_internal(self) -> SchedulerConfig:
        """The frozen internal config."""
        return SchedulerConfig(
            policy=self.policy,
            scorers=tuple((s.name, s.weight) for s in self.scorers),
            filters=tuple(self.filters),
            staleness_s=self.staleness_seconds,
            stale_penalty_ms=self.stale_penalty_ms,
            hotspot_margin_ms=self.hotspot_margin_ms,
            session_load_bound=self.session_load_bound,
            session_load_floor=self.session_load_floor,
            default_rtt_ms=self.default_rtt_ms,
            cross_zone_rtt_ms=self.cross_zone_rtt_ms,
            remote_region_rtt_ms=self.remote_region_rtt_ms,
            rtt_deadband_ms=self.rtt_deadband_ms,
            tie_margin_ms=self.tie_margin_ms,
            steer_budget_ms=self.steer_budget_ms,
            typical_prompt_tokens=self.typical_prompt_tokens,
            typical_prompt_alpha=self.typical_prompt_alpha,
            running_seq_ms=self.running_seq_ms,
            step_residual=self.step_residual,
            step_clock=self.step_clock,
            slot_wait_ms=self.slot_wait_ms,
            chunk_tokens=self.chunk_tokens,
            chunk_shared_ms=self.chunk_shared_ms,
            decode_seq_ms=self.decode_seq_ms,
            decode_kv_ms_per_token=self.decode_kv_ms_per_token,
            typical_output_tokens=self.typical_output_tokens,
            kv_pressure_threshold=self.kv_pressure_threshold,
            kv_pressure_max_ms=self.kv_pressure_max_ms,
            pool=self.pool,
            chwbl_prefix_blocks=self.chwbl_prefix_blocks,
            chwbl_virtual_nodes=self.chwbl_virtual_nodes,
            ttft_error_half_life_s=self.ttft_error_half_life_seconds,
            min_retry_after_s=self.min_retry_after_seconds,
            no_endpoints_retry_after_s=self.no_endpoints_retry_after_seconds,
        )


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _keys(model: type[BaseModel]) -> str:
    return ", ".join(sorted(f.alias or n for n, f in model.model_fields.items()))


def _problems(err: ValidationError, data: Mapping[str, Any]) -> list[str]:
    problems = []
    for e in err.errors(include_url=False):
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            model = RoutingConfigSpec if len(e["loc"]) == 1 else ScorerSpec
            msg = f"unknown key (known keys: {_keys(model)})"
        problems.append(f"{_where(tuple(e['loc']))}: {msg}")
    # checks of the whole list that pydantic skips once an item failed
    scorers = data.get("scorers")
    if isinstance(scorers, list) and not any(p.startswith("scorers: ") for p in problems):
        names = [s.get("name") for s in scorers if isinstance(s, Mapping)]
        dup = sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})
        if dup:
            problems.append(f"scorers: scorer(s) listed more than once: {', '.join(dup)}")
    return problems


def load_routing_config(data: Mapping[str, Any] | str) -> SchedulerConfig:
    """Validates ``data`` (a mapping, or YAML/JSON text; empty means defaults) and returns the
    internal config. Raises one ``PreheatError(INVALID_ARGUMENT)`` listing every problem."""
    if isinstance(data, str):
        try:
            loaded = yamlfile.load(data)
        except yaml.YAMLError as e:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT, f"invalid routing config: not valid YAML: {e}"
            ) from None
        data = {} if loaded is None else loaded
    if not isinstance(data, Mapping):
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT,
            f"invalid routing config: expected a mapping of keys, got {type(data).__name__}",
        )
    try:
        spec = RoutingConfigSpec.model_validate(dict(data))
    except ValidationError as e:
        problems = _problems(e, data)
        raise PreheatError(
            ErrorCode.INVALID_ARGUMENT,
            f"invalid routing config ({len(problems)} problem(s)): " + "; ".join(problems),
        ) from None
    return spec.to_internal()
