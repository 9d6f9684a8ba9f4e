"""The model -> pool lookup: table tests over literal pool snapshots."""

from __future__ import annotations

import pytest

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.router.pools import PoolSpec, model_table, resolve

CHAT = PoolSpec(name="chat", model="llama-8b", aliases=("chat", "default"))
CODE = PoolSpec(name="code", model="qwen-coder", namespace="dev")
ONE = PoolSpec(name="only", model="m")
ANY = PoolSpec(name="legacy")  # single-pool use with no --model


@pytest.mark.parametrize(
    ("pools", "model", "key"),
    [
        ([CHAT, CODE], "llama-8b", "chat"),
        ([CHAT, CODE], "chat", "chat"),
        ([CHAT, CODE], "default", "chat"),
        ([CHAT, CODE], "qwen-coder", "dev/code"),
        ([CHAT], "", "chat"),  # one pool: a request may leave the model out
        ([ONE], "anything", "only"),  # one pool, no aliases: its own validation answers
        ([ANY], "whatever", "legacy"),
    ],
)
def test_resolve_finds_the_pool(pools: list[PoolSpec], model: str, key: str) -> None:
    assert resolve(model_table(pools), model) == key


@pytest.mark.parametrize(
    ("pools", "model", "code"),
    [
        ([CHAT, CODE], "gpt-4", ErrorCode.NOT_FOUND),
        ([CHAT, CODE], "", ErrorCode.INVALID_ARGUMENT),
        ([], "llama-8b", ErrorCode.NOT_FOUND),
        ([], "", ErrorCode.NOT_FOUND),
        ([CHAT], "Chat", ErrorCode.NOT_FOUND),  # names are exact
    ],
)
def test_resolve_refuses(pools: list[PoolSpec], model: str, code: ErrorCode) -> None:
    with pytest.raises(PreheatError) as e:
        resolve(model_table(pools), model)
    assert e.value.code is code
    assert e.value.param == "model"
    if code is ErrorCode.NOT_FOUND:
        assert e.value.reason is Reason.MODEL_NOT_FOUND
        assert e.value.message.startswith("The model `")


def test_unknown_model_message_names_what_is_served() -> None:
    with pytest.raises(PreheatError) as e:
        resolve(model_table([CHAT, CODE]), "gpt-4")
    assert "`gpt-4`" in e.value.message
    for name in ("llama-8b", "chat", "qwen-coder"):
        assert f"`{name}`" in e.value.message


def test_table_lists_models_then_aliases_by_pool_key() -> None:
    t = model_table([CODE, CHAT])  # sorted by key: chat < dev/code
    assert t.served == ("llama-8b", "chat", "default", "qwen-coder")
    assert t.canonical["chat"] == "llama-8b"
    assert t.only is None
    assert model_table([ONE]).only == "only"
    assert model_table([CHAT]).only is None  # aliases: the model must be read


def test_a_name_two_pools_claim_goes_to_the_first_and_is_reported() -> None:
    other = PoolSpec(name="zz", model="chat")
    t = model_table([other, CHAT])
    assert resolve(t, "chat") == "chat"
    assert t.conflicts
    assert "zz" in t.conflicts[0]
    assert "chat" not in [n for n in t.served if t.by_name[n] == "zz"]
