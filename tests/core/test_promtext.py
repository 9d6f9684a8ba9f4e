"""Table tests of the Prometheus text parser and the model-server stats view."""

from __future__ import annotations

import math

import pytest

from preheat.core.promtext import (
    ModelServerMetricNames,
    ModelServerStats,
    PromTextError,
    Sample,
    histogram,
    model_server_stats,
    parse_model_server_stats,
    parse_samples,
)

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.42
"""


@pytest.mark.parametrize(
    ("text", "names", "labels", "want"),
    [
        pytest.param(VLLM_TEXT, None, None, ModelServerStats(7, 3, 0.25), id="vllm-names"),
        pytest.param("", None, None, ModelServerStats(None, None, None), id="empty->none"),
        pytest.param(
            "vllm:num_requests_running 2\n",
            None,
            None,
            ModelServerStats(num_waiting=None, num_running=2, kv_cache_usage=None),
            id="missing-metrics-are-none-not-minus-one",
        ),
        pytest.param(
            "sg:queue 4\nsg:running 1\nsg:kv 0.5\nvllm:num_requests_waiting 99\n",
            ModelServerMetricNames("sg:queue", "sg:running", "sg:kv"),
            None,
            ModelServerStats(4, 1, 0.5),
            id="custom-names",
        ),
        pytest.param(
            'w{engine="0"} 1\nw{engine="1"} 2\nr{engine="0"} 3\nr{engine="1"} 4\n'
            'k{engine="0"} 0.2\nk{engine="1"} 0.7\n',
            ModelServerMetricNames("w", "r", "k"),
            None,
            ModelServerStats(3, 7, 0.7),
            id="engines-summed-usage-max",
        ),
        pytest.param(
            'w{model_name="a"} 1\nw{model_name="b"} 2\n',
            ModelServerMetricNames("w", "r", "k"),
            {"model_name": "b"},
            ModelServerStats(2, None, None),
            id="label-filter",
        ),
        pytest.param(
            "w NaN\nr 1\n",
            ModelServerMetricNames("w", "r", "k"),
            None,
            ModelServerStats(None, 1, None),
            id="nan-is-no-data",
        ),
    ],
)
def test_model_server_stats(
    text: str,
    names: ModelServerMetricNames | None,
    labels: dict[str, str] | None,
    want: ModelServerStats,
) -> None:
    assert parse_model_server_stats(text, names, labels=labels) == want


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("a 1", Sample("a", {}, 1.0)),
        ("a_b:c{} 2.5", Sample("a_b:c", {}, 2.5)),
        ('a{x="1",y="two"} 3', Sample("a", {"x": "1", "y": "two"}, 3.0)),
        ('a{ x = "1" , } 3', Sample("a", {"x": "1"}, 3.0)),
        ('a{x="q\\"uo\\\\te\\nnl"} 1', Sample("a", {"x": 'q"uo\\te\nnl'}, 1.0)),
        ('a{x="has } and , inside"} 1', Sample("a", {"x": "has } and , inside"}, 1.0)),
        ("a +Inf", Sample("a", {}, math.inf)),
        ("a -Inf", Sample("a", {}, -math.inf)),
        ("a 1e3 1700000000000", Sample("a", {}, 1000.0, 1700000000000)),
        ("  a 1  ", Sample("a", {}, 1.0)),
    ],
)
def test_parse_line(line: str, want: Sample) -> None:
    assert parse_samples(line) == [want]


def test_parse_skips_comments_and_blank_lines() -> None:
    assert parse_samples("# HELP a x\n\n# TYPE a gauge\na 1\n# EOF\n") == [Sample("a", {}, 1.0)]


def test_nan_value() -> None:
    (s,) = parse_samples("a NaN")
    assert math.isnan(s.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a", "no value"),
        ("a x", "not a number"),
        ("1a 2", "must start"),
        ('a{x="1" 2', "expected ',' or '}'"),
        ('a{x="1', "unterminated"),
        ("a{x=1} 2", "expected '=\"'"),
        ('a{x="1",x="2"} 3', "given twice"),
        ("a 1 2 3", "trailing text"),
        ("a 1 soon", "timestamp"),
        ('a{="1"} 2', "label name"),
    ],
)
def test_malformed_lines_name_the_line(text: str, problem: str) -> None:
    with pytest.raises(PromTextError, match=problem) as err:
        parse_samples("ok 1\n" + text)
    assert err.value.line_no == 2
    assert "line 2" in str(err.value)


def test_histogram_buckets() -> None:
    h = histogram(parse_samples(VLLM_TEXT), "vllm:time_to_first_token_seconds")
    assert h.buckets == ((0.01, 1.0), (0.1, 4.0), (math.inf, 5.0))
    assert h.count == 5.0
    assert h.sum == pytest.approx(0.42)
    assert h.series == 1


def test_histogram_sums_series_and_filters_labels() -> None:
    text = (
        'h_bucket{s="a",le="1"} 1\nh_bucket{s="a",le="+Inf"} 2\n'
        'h_bucket{s="b",le="1"} 10\nh_bucket{s="b",le="+Inf"} 20\n'
        'h_count{s="a"} 2\nh_count{s="b"} 20\n'
    )
    samples = parse_samples(text)
    both = histogram(samples, "h")
    assert both.buckets == ((1.0, 11.0), (math.inf, 22.0))
    assert both.count == 22.0
    assert both.sum is None
    assert both.series == 2
    only_b = histogram(samples, "h", labels={"s": "b"})
    assert only_b.buckets == ((1.0, 10.0), (math.inf, 20.0))


def test_absent_histogram_is_empty() -> None:
    h = histogram(parse_samples(VLLM_TEXT), "nope")
    assert (h.buckets, h.count, h.sum, h.series) == ((), None, None, 0)


def test_stats_from_samples_accepts_any_iterable() -> None:
    samples = iter(parse_samples(VLLM_TEXT))
    assert model_server_stats(samples).num_waiting == 7


def test_only_named_metrics_are_parsed_and_the_rest_is_skipped_unread() -> None:
    text = (
        "# HELP vllm:num_requests_waiting waiting\n"
        'vllm:num_requests_waiting{model_name="m"} 3\n'
        "vllm:num_requests_waiting_extra 9\n"  # a longer name with the same prefix
        "this line is not { valid exposition\n"  # skipped, so no error
        "vllm:num_requests_running 2\n"
    )
    samples = parse_samples(text, only=["vllm:num_requests_waiting", "vllm:num_requests_running"])
    assert [(s.name, s.value) for s in samples] == [
        ("vllm:num_requests_waiting", 3.0),
        ("vllm:num_requests_running", 2.0),
    ]
    with pytest.raises(PromTextError):
        parse_samples(text)
