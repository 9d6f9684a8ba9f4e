"""Trace loading: the four formats, slicing and scaling, derived sessions, prompt text."""

import json
from pathlib import Path

import pytest

from preheat.engine.simtokenizer import SimTokenizer
from preheat.workload.traces import (
    TraceError,
    TraceOptions,
    TraceRequest,
    derive_root_sessions,
    detect_format,
    load_trace,
    prompt_text,
    read_trace,
    tied_share,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _jsonl(tmp_path: Path, rows: list[object], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def _mooncake(t: int, n_in: int, ids: list[int], n_out: int = 10) -> dict[str, object]:
    return {"timestamp": t, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def test_preheat_jsonl_with_optional_fields(tmp_path: Path):
    p = _jsonl(
        tmp_path,
        [
            {"timestamp_ms": 1500, "input_tokens": 600, "output_tokens": 5, "session_id": "a",
             "prefix_block_ids": [3, 4]},
            {"timestamp_ms": 500, "input_tokens": 10, "output_tokens": 2},
        ],
    )  # fmt: skip
    assert detect_format(p) == "preheat"
    reqs = load_trace(p)
    assert [r.line for r in reqs] == [2, 1]  # sorted by arrival
    assert reqs[0] == TraceRequest(0.0, 10, 2, line=2, index=0)
    assert reqs[1].arrival_s == pytest.approx(1.0)
    assert reqs[1].session_id == "a"
    assert reqs[1].prefix_block_ids == (3, 4)


def test_mooncake_blocks_sessions_and_clipping(tmp_path: Path):
    p = _jsonl(
        tmp_path,
        [
            _mooncake(0, 1000, [0, 1]),
            _mooncake(2000, 1500, [0, 1, 2]),
            _mooncake(4000, 600, [0, 7]),
            _mooncake(6000, 100, [0]),
        ],
    )
    assert detect_format(p) == "mooncake"
    reqs = load_trace(p, TraceOptions(sessions="root", max_input_tokens=1200))
    # block 0 starts every prompt (a shared system prompt): the root is the next block
    assert [r.session_id for r in reqs] == ["c1", "c1", "c7", "r3"]
    assert reqs[1].input_tokens == 1200
    assert reqs[1].prefix_block_ids == (0, 1, 2)  # ceil(1200/512) = 3 blocks kept
    assert reqs[0].prefix_block_ids == (0, 1)
    assert [r.session_id for r in load_trace(p)] == ["", "", "", ""]


def test_root_sessions_keep_a_blockless_traces_own_ids(tmp_path: Path):
    """Without prefix blocks there are no conversations to find: ``root`` keeps what the
    file says (nothing here), not one session per request."""
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    assert [r.session_id for r in load_trace(azure, TraceOptions(sessions="root"))] == ["", ""]


def test_token_scale_keeps_block_structure(tmp_path: Path):
    p = _jsonl(tmp_path, [_mooncake(0, 1000, [0, 1]), _mooncake(1, 1500, [0, 1, 2])])
    a, b = load_trace(p, TraceOptions(token_scale=0.25))
    assert (a.block_tokens, a.input_tokens) == (128, 128 + 122)  # 488 -> 122
    assert (b.block_tokens, b.input_tokens) == (128, 256 + 119)  # 476 -> 119
    ta, tb = prompt_text(a).split(), prompt_text(b).split()
    assert (len(ta), len(tb)) == (250, 375)
    assert ta[:128] == tb[:128]
    clipped = load_trace(p, TraceOptions(token_scale=0.25, max_input_tokens=200))
    assert [(r.input_tokens, r.prefix_block_ids) for r in clipped] == [
        (200, (0, 1)),
        (200, (0, 1)),
    ]


def test_slice_and_scale(tmp_path: Path):
    p = _jsonl(tmp_path, [_mooncake(1000 * i, 10, [i]) for i in range(10)])
    reqs = load_trace(p, TraceOptions(start_s=2, duration_s=5, time_scale=0.5, rate_scale=2))
    assert [r.line for r in reqs] == [3, 4, 5, 6, 7]
    assert [r.arrival_s for r in reqs] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert [r.index for r in reqs] == [0, 1, 2, 3, 4]
    assert len(load_trace(p, TraceOptions(max_requests=3))) == 3


def test_azure_csv(tmp_path: Path):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    assert detect_format(p) == "azure"
    reqs = load_trace(p)
    assert [(r.input_tokens, r.output_tokens) for r in reqs] == [(374, 44), (396, 109)]
    assert reqs[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert reqs[1].line == 3


BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_burstgpt_csv_skips_failed_requests_and_counts_them(tmp_path: Path):
    p = tmp_path / "b.csv"
    p.write_text(
        BURSTGPT_HEADER
        + "5,ChatGPT,472,18,490,Conversation log\n"
        + "45,ChatGPT,1087,0,1087,Conversation log\n"  # failed: 0 response tokens
        + "52.5,GPT-4,417,276,693,API log\n"
        + "40,ChatGPT,20,1,21,Conversation log\n"
        + "60,GPT-4,0,7,7,API log\n"  # an empty prompt
        + "61,GPT-4,3,0,3,API log\n"
    )
    assert detect_format(p) == "burstgpt"
    trace = read_trace(p)
    assert trace.fmt == "burstgpt"
    assert [(r.input_tokens, r.output_tokens, r.line) for r in trace.requests] == [
        (472, 18, 2),
        (20, 1, 5),
        (417, 276, 4),
    ]
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0.0, 35.0, 47.5])
    assert trace.skipped == {"no_output": 2, "no_prompt": 1}
    said = trace.describe_skipped()
    assert said.startswith("skipped 3 rows of the file: ")
    assert "2 with 0 output tokens (BurstGPT: a failed request)" in said
    assert "1 with 0 prompt tokens" in said
    assert load_trace(p, TraceOptions(rate_scale=5))[2].arrival_s == pytest.approx(9.5)


def test_spread_ties_spreads_each_shared_second_evenly_in_file_order(tmp_path: Path):
    p = tmp_path / "b.csv"
    p.write_text(
        BURSTGPT_HEADER
        + "5,ChatGPT,10,1,11,Conversation log\n"
        + "5,ChatGPT,20,1,21,Conversation log\n"
        + "5,ChatGPT,30,1,31,Conversation log\n"
        + "5,ChatGPT,40,1,41,Conversation log\n"
        + "6,ChatGPT,50,1,51,Conversation log\n"
        + "8,ChatGPT,60,1,61,Conversation log\n"
        + "8,ChatGPT,70,1,71,Conversation log\n"
    )
    together = load_trace(p)
    assert [r.arrival_s for r in together] == [0, 0, 0, 0, 1, 3, 3]
    spread = load_trace(p, TraceOptions(spread_ties_s=1.0, rate_scale=2))
    assert [r.input_tokens for r in spread] == [10, 20, 30, 40, 50, 60, 70]
    assert [r.arrival_s for r in spread] == pytest.approx([0, 0.125, 0.25, 0.375, 0.5, 1.5, 1.75])
    # the slice is cut in the spread time: 0.7 s on keeps the last of second 5 (5.75 s)
    later = load_trace(p, TraceOptions(spread_ties_s=1.0, start_s=0.7))
    assert [r.input_tokens for r in later] == [40, 50, 60, 70]
    # spread past the next second: the runs interleave, and arrivals stay in time order
    wide = load_trace(p, TraceOptions(spread_ties_s=2.0))
    assert [r.input_tokens for r in wide] == [10, 20, 30, 50, 40, 60, 70]
    assert [r.arrival_s for r in wide] == pytest.approx([0, 0.5, 1, 1, 1.5, 3, 4])
    assert tied_share(together) == pytest.approx(4 / 7)
    assert tied_share(spread) == 0.0
    with pytest.raises(ValueError, match="spread_ties_s must be >= 0"):
        TraceOptions(spread_ties_s=-1)


def test_a_burstgpt_trace_keeps_one_models_rows_when_asked(tmp_path: Path):
    p = tmp_path / "b.csv"
    p.write_text(
        BURSTGPT_HEADER
        + "0,ChatGPT,10,5,15,Conversation log\n"
        + "1,GPT-4,20,6,26,API log\n"
        + "2,GPT-4,30,0,30,API log\n"  # GPT-4's, but failed
        + "4,GPT-4,40,8,48,Conversation log\n"
    )
    trace = read_trace(p, TraceOptions(model="GPT-4"))
    assert [(r.input_tokens, r.arrival_s) for r in trace.requests] == [(20, 0.0), (40, 3.0)]
    assert trace.skipped == {"other_model": 1, "no_output": 1}
    assert "1 with another model than the one asked for" in trace.describe_skipped()
    assert read_trace(p, TraceOptions(model="Claude")).requests == []
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n")
    with pytest.raises(TraceError, match="'GPT-4': the azure format has no model column"):
        load_trace(azure, TraceOptions(model="GPT-4"))


def test_azure_rows_with_no_tokens_are_skipped_not_fatal(tmp_path: Path):
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.0000000,374,0\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    trace = read_trace(p)
    assert [r.output_tokens for r in trace.requests] == [44, 109]
    assert trace.skipped == {"no_output": 1}
    assert read_trace(tmp_path / "a.csv", TraceOptions(fmt="azure")).skipped == {"no_output": 1}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,ChatGPT,1,1,2,API log", "b.csv:2: Timestamp must be seconds >= 0, got 'x'"),
        ("-1,ChatGPT,1,1,2,API log", "b.csv:2: Timestamp must be seconds >= 0, got '-1'"),
        ("nan,ChatGPT,1,1,2,API log", "b.csv:2: Timestamp must be seconds >= 0, got 'nan'"),
        ("1,ChatGPT,-4,1,2,API log", "b.csv:2: Request tokens must be >= 0, got -4"),
        ("1,ChatGPT,4,1.5,2,API log", "b.csv:2: Response tokens must be an integer, got '1.5'"),
        ("1,ChatGPT,4", "b.csv:2: expected 6 columns, got 3"),
    ],
)
def test_malformed_burstgpt_names_line(tmp_path: Path, row: str, message: str):
    p = tmp_path / "b.csv"
    p.write_text(BURSTGPT_HEADER + row + "\n")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_trace(p)
    p.write_text("Timestamp,Model,Request tokens\n1,ChatGPT,3\n")
    with pytest.raises(TraceError, match="not a known trace"):
        load_trace(p)
    with pytest.raises(TraceError, match=r"b\.csv:1: CSV header lacks Response tokens"):
        load_trace(p, TraceOptions(fmt="burstgpt"))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (['{"timestamp": 0, "input_length": 5'], "t.jsonl:1: invalid JSON"),
        ([_mooncake(0, 10, [0]), _mooncake(1, 600, [0])], "t.jsonl:2: hash_ids has 1 blocks"),
        ([_mooncake(0, 10, [0]), {"timestamp": 1, "input_length": 5, "output_length": 1}],
         "t.jsonl:2: missing field 'hash_ids'"),
        ([_mooncake(0, 10, [0]), _mooncake(-5, 10, [0])], "t.jsonl:2: timestamp must be"),
        ([{"timestamp_ms": 0, "input_tokens": 0, "output_tokens": 1}],
         "t.jsonl:1: input_tokens must be >= 1"),
        ([{"timestamp_ms": 0, "input_tokens": 3, "output_tokens": "x"}],
         "t.jsonl:1: output_tokens must be an integer"),
        (["[1, 2]"], "t.jsonl:1: expected a JSON object"),
        ([{"foo": 1}], "t.jsonl:1: unknown JSONL record"),
    ],
)  # fmt: skip
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, rows: list[object], message: str):
    p = _jsonl(tmp_path, rows)
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        load_trace(p)


def test_malformed_azure_names_line(tmp_path: Path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nnope,3,4\n")
    with pytest.raises(TraceError, match=r"a\.csv:3: bad TIMESTAMP 'nope'"):
        load_trace(p)
    p.write_text("TIMESTAMP,Tokens\n")
    with pytest.raises(TraceError, match="not a known trace"):
        load_trace(p)


def test_missing_file_and_bad_options(tmp_path: Path):
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match=r"time_scale must be > 0.*max_requests must be >= 0"):
        TraceOptions(time_scale=0, max_requests=-1)


def test_prompt_text_shares_prefix_for_shared_blocks():
    tok = SimTokenizer()
    a = TraceRequest(0, 1000, 1, prefix_block_ids=(0, 1), index=0)
    b = TraceRequest(0, 1100, 1, prefix_block_ids=(0, 1, 2), index=1)
    c = TraceRequest(0, 700, 1, prefix_block_ids=(0, 9), index=2)
    ta, tb, tc = (tok.encode(prompt_text(r)) for r in (a, b, c))
    assert (len(ta), len(tb), len(tc)) == (1000, 1100, 700)
    assert ta == tb[:1000]  # the partial last block is a prefix of the full block
    assert tc[:512] == ta[:512]
    assert tc[512] != ta[512]
    d = TraceRequest(0, 50, 1, index=3)
    e = TraceRequest(0, 50, 1, index=4)
    assert len(prompt_text(d).split()) == 50
    assert not set(prompt_text(d).split()) & set(prompt_text(e).split())


def test_derive_root_sessions_without_shared_root():
    assert derive_root_sessions([[5, 6], [5, 7], [8]]) == ["c5", "c5", "c8"]


@pytest.mark.needs_shared(DATA / "mooncake_conversation_trace.jsonl")
def test_real_traces_load():
    reqs = load_trace(
        DATA / "mooncake_conversation_trace.jsonl",
        TraceOptions(duration_s=60, sessions="root"),
    )
    assert 100 < len(reqs) < 1000
    assert all(r.session_id.startswith(("c", "r")) for r in reqs)
    azure = load_trace(DATA / "azure_llm_2023_conv.csv", TraceOptions(max_requests=100))
    assert len(azure) == 100
    assert azure[0].arrival_s == 0.0


def test_a_trace_over_the_memory_bound_is_refused_at_the_row_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every row is held to be sorted before slicing: a file of more rows than memory holds
    # filled it (the bound is 20 million; 3 here so that the test writes 5 rows)
    from preheat.workload import traces

    monkeypatch.setattr(traces, "MAX_TRACE_REQUESTS", 3)
    p = tmp_path / "t.jsonl"
    p.write_text(
        "".join(
            json.dumps({"timestamp_ms": i, "input_tokens": 4, "output_tokens": 1}) + "\n"
            for i in range(5)
        )
    )
    with pytest.raises(TraceError, match=r"t\.jsonl:4: more than 3 requests: at most"):
        traces.load_trace(p)
    monkeypatch.setattr(traces, "MAX_TRACE_REQUESTS", 5)
    assert len(traces.load_trace(p)) == 5
