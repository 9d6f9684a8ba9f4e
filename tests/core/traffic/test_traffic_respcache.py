"""The response cache: deterministic requests only, TTL, a memory bound (LRU), keys that
change with every output-changing parameter and with the tenant."""

from __future__ import annotations

from preheat.core.traffic.respcache import (
    ENTRY_OVERHEAD,
    CacheConfig,
    CachedAnswer,
    ResponseCache,
    cache_key,
    deterministic,
)


def _answer(text: str) -> CachedAnswer:
    return CachedAnswer(text=text, finish_reason=1, prompt_tokens=3, completion_tokens=2)


def test_only_greedy_or_seeded_single_choice_requests_are_deterministic() -> None:
    assert deterministic(0.0, None, 1)
    assert deterministic(0.7, 42, None)
    assert not deterministic(0.7, None, 1)
    assert not deterministic(None, None, 1)  # the default temperature samples
    assert not deterministic(0.0, None, 2)


def test_an_answer_lives_for_its_ttl() -> None:
    c = ResponseCache(CacheConfig(enabled=True, ttl_s=10.0))
    assert c.put("k", _answer("hi"), now=100.0)
    assert c.get("k", 109.9) == _answer("hi")
    assert c.get("k", 110.0) is None
    assert len(c) == 0
    assert c.bytes == 0


def test_the_memory_bound_drops_the_least_recently_used() -> None:
    size = len(b"aaaa") + ENTRY_OVERHEAD
    c = ResponseCache(CacheConfig(enabled=True, max_bytes=2 * size))
    c.put("a", _answer("aaaa"), 0.0)
    c.put("b", _answer("bbbb"), 0.0)
    assert c.get("a", 1.0) is not None  # a is now the most recent
    c.put("c", _answer("cccc"), 2.0)
    assert c.get("b", 3.0) is None
    assert c.get("a", 3.0) is not None
    assert c.get("c", 3.0) is not None
    assert c.bytes == 2 * size
    assert not c.put("huge", _answer("x" * 10 * size), 4.0)  # larger than the bound


def test_the_key_changes_with_every_output_changing_part() -> None:
    base = cache_key("m", "chat", {"messages": ["hi"], "temperature": 0, "max_tokens": 8}, "t1")
    assert base == cache_key(
        "m", "chat", {"max_tokens": 8, "temperature": 0, "messages": ["hi"]}, "t1"
    )
    for other in (
        cache_key("m2", "chat", {"messages": ["hi"], "temperature": 0, "max_tokens": 8}, "t1"),
        cache_key(
            "m", "completions", {"messages": ["hi"], "temperature": 0, "max_tokens": 8}, "t1"
        ),
        cache_key("m", "chat", {"messages": ["ho"], "temperature": 0, "max_tokens": 8}, "t1"),
        cache_key("m", "chat", {"messages": ["hi"], "temperature": 0, "max_tokens": 9}, "t1"),
        cache_key("m", "chat", {"messages": ["hi"], "temperature": 0, "max_tokens": 8}, "t2"),
    ):
        assert other != base
