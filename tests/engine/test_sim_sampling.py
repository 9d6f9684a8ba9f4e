"""The sim engine's sampling options: stop token ids and min_tokens are honoured (the output
ends at the first stop id at or past min_tokens, its text left out, usage counting it);
every option it cannot apply is refused by name, never ignored."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.sampling import SamplingOptions, StructuredOutput
from preheat.engine.base import EngineOutput, EngineRequest, FinishReason, Sampling
from preheat.engine.sim import SIM_HONOURS, SimConfig, SimEngine, sim_refuses
from preheat.engine.simtokenizer import SimTokenizer

VOCAB = 8  # small, so a stop id comes within a few tokens


@pytest.fixture
async def engine() -> AsyncIterator[SimEngine]:
    e = SimEngine(
        SimConfig.from_options(
            {"model": "m", "load_s": 0, "warmup_s": 0, "vocab_size": VOCAB, "time_scale": 0.05}
        )
    )
    await e.load()
    yield e
    await e.shutdown()


async def run(engine: SimEngine, rid: str, max_tokens: int, **opts: object) -> list[EngineOutput]:
    ignore_eos = bool(opts.pop("ignore_eos", False))
    sampling = Sampling(
        max_tokens=max_tokens,
        seed=11,
        ignore_eos=ignore_eos,
        options=SamplingOptions(**opts),  # type: ignore[arg-type]
    )
    return [o async for o in engine.generate(EngineRequest(rid, (1, 2, 3), sampling))]


def ids_text(outs: list[EngineOutput]) -> tuple[list[int], str]:
    return [t for o in outs for t in o.token_ids], "".join(o.text for o in outs)


async def test_without_stop_ids_the_output_runs_to_max_tokens(engine: SimEngine) -> None:
    outs = await run(engine, "r0", 40)
    ids, text = ids_text(outs)
    assert len(ids) == 40
    assert outs[-1].finish_reason is FinishReason.LENGTH
    assert text == SimTokenizer(VOCAB).decode(ids)


@pytest.mark.parametrize("min_tokens", [0, 5])
async def test_a_stop_token_id_ends_the_output(engine: SimEngine, min_tokens: int) -> None:
    free_ids, _ = ids_text(await run(engine, "a", 40))  # the same seed: the same draws
    stop = free_ids[min_tokens + 2]  # a token that comes at or past min_tokens
    outs = await run(engine, "b", 40, stop_token_ids=(stop,), min_tokens=min_tokens)
    ids, text = ids_text(outs)
    first = next(i for i, t in enumerate(free_ids) if t == stop and i >= min_tokens)
    assert ids == free_ids[: first + 1]  # up to and including the stop id
    assert outs[-1].finish_reason is FinishReason.STOP
    assert text == SimTokenizer(VOCAB).decode(ids[:-1])  # the stop id's text is left out
    usage = outs[-1].usage
    assert usage is not None
    assert usage.completion_tokens == len(ids)


async def test_min_tokens_holds_off_the_end_of_sequence() -> None:
    """With an end-of-sequence probability of 1 the output is one token; min_tokens=6 makes
    it at least 7 (the EOS can come only after the sixth); ignore_eos runs to max_tokens."""
    e = SimEngine(
        SimConfig.from_options(
            {"model": "m", "load_s": 0, "warmup_s": 0, "eos_probability": 1.0, "time_scale": 0.05}
        )
    )
    await e.load()
    try:
        assert len(ids_text(await run(e, "x", 20))[0]) == 1
        outs = await run(e, "y", 20, min_tokens=6)
        assert len(ids_text(outs)[0]) == 7
        assert outs[-1].finish_reason is FinishReason.STOP
        outs = await run(e, "z", 20, ignore_eos=True)
        assert len(ids_text(outs)[0]) == 20
        assert outs[-1].finish_reason is FinishReason.LENGTH
    finally:
        await e.shutdown()


REFUSED: dict[str, dict[str, object]] = {
    "sampling.top_k": {"top_k": 5},
    "sampling.min_p": {"min_p": 0.1},
    "sampling.presence_penalty": {"presence_penalty": 0.5},
    "sampling.frequency_penalty": {"frequency_penalty": 0.5},
    "sampling.repetition_penalty": {"repetition_penalty": 1.3},
    "sampling.logit_bias": {"logit_bias": ((1, 5.0),)},
    "sampling.logprobs": {"logprobs": 0},
    "sampling.prompt_logprobs": {"prompt_logprobs": 1},
    "sampling.structured_output": {"structured_output": StructuredOutput(regex="a")},
}


@pytest.mark.parametrize("field", sorted(REFUSED))
async def test_an_option_it_cannot_apply_is_refused_by_name(engine: SimEngine, field: str) -> None:
    with pytest.raises(PreheatError) as exc:
        await run(engine, "r-" + field, 4, **REFUSED[field])
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    assert field in exc.value.message
    assert (await run(engine, "ok-" + field, 2))[-1].finish_reason is FinishReason.LENGTH


async def test_all_refused_options_are_named_at_once(engine: SimEngine) -> None:
    every: dict[str, object] = {}
    for opts in REFUSED.values():
        every.update(opts)
    with pytest.raises(PreheatError) as exc:
        await run(engine, "all", 4, **every)
    for field in REFUSED:
        assert field in exc.value.message


def test_honoured_and_refused_cover_every_option() -> None:
    every = SamplingOptions(
        **{k: v for opts in REFUSED.values() for k, v in opts.items()},  # type: ignore[arg-type]
        stop_token_ids=(1,),
        min_tokens=1,
    )
    assert set(sim_refuses(every)) == set(REFUSED)
    assert set(REFUSED).isdisjoint(SIM_HONOURS)
    assert sim_refuses(SamplingOptions(stop_token_ids=(1,), min_tokens=1)) == []
    # values with no effect are accepted
    assert sim_refuses(SamplingOptions(presence_penalty=0.0, repetition_penalty=1.0)) == []
