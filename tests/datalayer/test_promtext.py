"""Prometheus text parser: agrees with prometheus_client on a real-looking vLLM page; edge cases; garbage."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families
from vllm_metrics_fixture import VllmPage, render_vllm_metrics

from epp.datalayer.promtext import MetricSelector, PageMemo, Sample, SelectorError, parse, parse_selector, select


def reference(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the page per sample name, by prometheus_client's parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@pytest.mark.parametrize("models", [("m",), ("meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "tweet-summary-lora")])
def test_agrees_with_prometheus_client_on_every_sample_of_a_vllm_page(models: tuple[str, ...]) -> None:
    text = render_vllm_metrics(VllmPage(model_names=models))
    ref = reference(text)
    assert "vllm:time_to_first_token_seconds_bucket" in ref and len(ref) > 80
    got = parse(text, ref)
    assert got.errors == {}
    assert set(got.samples) == set(ref)
    for name, samples in ref.items():
        assert [(dict(s.labels), s.value) for s in got.samples[name]] == samples, name


def test_realistic_page_values() -> None:
    page = VllmPage(waiting=5, running=9, kv_usage=0.75)
    result = parse(render_vllm_metrics(page).encode(), ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"])
    (waiting,) = result.samples["vllm:num_requests_waiting"]
    assert waiting == Sample({"engine": "0", "model_name": page.model_names[0]}, 5.0, None)
    assert result.samples["vllm:kv_cache_usage_perc"][0].value == 0.75


def test_names_are_matched_whole_not_by_prefix() -> None:
    text = "x_total 1\nx_sum 2\nx 3\nxx 4\n# TYPE x gauge\n"
    result = parse(text, ["x", "x_sum", "y"])
    assert [s.value for s in result.samples["x"]] == [3.0]
    assert [s.value for s in result.samples["x_sum"]] == [2.0]
    assert "y" not in result.samples and result.errors == {}


def test_first_and_last_lines_without_trailing_newline_crlf_blanks_and_comments() -> None:
    text = (
        '# HELP a with a 3 in it\na 1\r\n\n# a free comment: the group goes on\n  \na 4\n# TYPE b gauge\nb{l="v"} 2\r'
    )
    result = parse(text, ["a", "b"])
    assert [s.value for s in result.samples["a"]] == [1.0, 4.0]
    assert result.samples["b"] == [Sample({"l": "v"}, 2.0, None)]
    assert result.errors == {}
    assert parse("a 1", ["a"]).samples["a"] == [Sample({}, 1.0, None)]


def test_search_for_a_name_ends_with_its_group() -> None:
    # The format requires one group per metric; a stray later group is not read.
    text = "# TYPE a gauge\na 1\n# TYPE b gauge\nb 2\na 3\n"
    assert [s.value for s in parse(text, ["a"]).samples["a"]] == [1.0]
    # Without HELP/TYPE lines there are no group boundaries to rely on: the whole page is searched.
    assert [s.value for s in parse("a 1\nb 2\na 3\n", ["a"]).samples["a"]] == [1.0, 3.0]


def test_special_values_timestamps_and_whitespace() -> None:
    text = 'm{k="a"} NaN\nm{k="b"} +Inf 1700000000000\nm{k="c"} -Inf\nm { k = "d" , j="e", } 1.5e3\nm\t7 -12\nm{} 0\n'
    samples = parse(text, ["m"]).samples["m"]
    assert math.isnan(samples[0].value)
    assert samples[1] == Sample({"k": "b"}, math.inf, 1700000000000)
    assert samples[2].value == -math.inf
    assert samples[3] == Sample({"k": "d", "j": "e"}, 1500.0, None)
    assert samples[4] == Sample({}, 7.0, -12)
    assert samples[5] == Sample({}, 0.0, None)


def test_escaped_label_values() -> None:
    text = r'm{path="C:\\dir",quote="say \"hi\"",nl="a\nb",brace="}{",comma="x,y"} 1' + "\n"
    (sample,) = parse(text, ["m"]).samples["m"]
    assert sample.labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "brace": "}{", "comma": "x,y"}


def test_utf8_label_values() -> None:
    (sample,) = parse('m{who="Zoë 🦙"} 1\n'.encode(), ["m"]).samples["m"]
    assert sample.labels == {"who": "Zoë 🦙"}


@pytest.mark.parametrize(
    "line",
    [
        "m",
        "m ",
        'm{a="b"}',
        "m abc",
        "m 1 2 3",
        "m 1 1.5",
        'm{a="b" 1',
        "m{a=b} 1",
        'm{a="b"c="d"} 1',
        'm{="b"} 1',
        'm{a="b",,} 1',
        'm{a="b"}} 1',
        'm{a="unterminated} 1',
        "m{\x00\xff} 1",
    ],
)
def test_garbage_lines_are_errors_for_their_name_only(line: str) -> None:
    text = f"ok 1\n{line}\nm 5\nok 2\n"
    result = parse(text.encode("utf-8", "surrogateescape"), ["m", "ok"])
    assert "m" in result.errors and result.errors["m"].startswith("m: ")
    assert [s.value for s in result.samples["ok"]] == [1.0, 2.0]
    assert [s.value for s in result.samples["m"]] == [5.0]  # the good line still counts
    assert "ok" not in result.errors


def test_random_garbage_never_raises() -> None:
    rng = random.Random(1234)
    page = render_vllm_metrics().encode()
    alphabet = b'm{}="\\, \n\t#01.eE+-InfNa'
    names = ["m", "vllm:num_requests_waiting", "vllm:lora_requests_info"]
    for _ in range(300):
        blob = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        parse(blob, names)
        cut = rng.randint(0, len(page))
        mutated = bytearray(page[:cut])
        for _ in range(20):
            if mutated:
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        parse(bytes(mutated), names)
    parse(b"", names)
    parse(bytes(range(256)) * 10, names)


def test_truncated_page_reports_the_cut_line() -> None:
    text = render_vllm_metrics()
    cut = text.index("vllm:lora_requests_info{") + len('vllm:lora_requests_info{max_lora="4",runn')
    result = parse(text[:cut], ["vllm:lora_requests_info", "vllm:num_requests_running"])
    assert "vllm:lora_requests_info" in result.errors
    assert result.samples["vllm:num_requests_running"][0].value == 12.0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("vllm:num_requests_waiting", MetricSelector("vllm:num_requests_waiting")),
        (
            "nv_trt_llm_request_metrics{request_type=waiting}",
            MetricSelector("nv_trt_llm_request_metrics", (("request_type", "waiting"),)),
        ),
        ('m{a="x,y", b = z }', MetricSelector("m", (("a", "x,y"), ("b", "z")))),
        ('m{a!="x",b=~"y.*",c!~"z",d="w"}', MetricSelector("m", (("d", "w"),))),  # only = matchers kept
        ('m{a="q\\"uote"}', MetricSelector("m", (("a", 'q"uote'),))),
        ("m{}", MetricSelector("m")),
        ("  m  ", MetricSelector("m")),
    ],
)
def test_parse_selector(spec: str, expected: MetricSelector) -> None:
    assert parse_selector(spec) == expected


@pytest.mark.parametrize("spec", ["", "{a=b}", "1m", "m{a}", "m{a=b", "m{a==b}", "m x"])
def test_parse_selector_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(SelectorError, match="metric spec"):
        parse_selector(spec)


def test_select_prefers_matching_labels_then_latest_timestamp_then_last() -> None:
    samples = [
        Sample({"t": "waiting"}, 1.0, 100),
        Sample({"t": "waiting"}, 2.0, 300),
        Sample({"t": "waiting"}, 3.0, 200),
        Sample({"t": "scheduled"}, 9.0, 999),
    ]
    assert select(samples, MetricSelector("m", (("t", "waiting"),))) == samples[1]
    assert select(samples, MetricSelector("m", (("t", "none"),))) is None
    untimed = [Sample({}, 1.0), Sample({}, 2.0)]
    assert select(untimed, MetricSelector("m")) == untimed[1]
    assert select(None, MetricSelector("m")) is None


def test_a_longer_name_sharing_the_prefix_before_the_wanted_group_is_passed_over() -> None:
    # The first line starting with "x" belongs to x_total's group; x's own group comes later.
    text = "# TYPE x_total counter\nx_total 1\n# TYPE x gauge\nx 3\nx 4\n# TYPE y gauge\ny 5\n"
    assert [s.value for s in parse(text, ["x"]).samples["x"]] == [3.0, 4.0]


def _vllm_page(waiting: int, models: tuple[str, ...] = ("m",)) -> bytes:
    return render_vllm_metrics(VllmPage(waiting=waiting, model_names=models)).encode()


def test_a_memo_changes_nothing_in_the_result_while_the_page_moves() -> None:
    names = [
        "vllm:num_requests_waiting",
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
        "vllm:kv_cache_usage_perc",
    ]
    names.append("vllm:time_to_first_token_seconds_bucket")  # no TYPE line of its own: never remembered
    memo = PageMemo()
    pages = [_vllm_page(w) for w in (0, 7, 123456789)] + [_vllm_page(1, ("m", "sql-lora", "chat-lora"))]
    pages.append(b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 5\n")  # the layout changes
    for page in pages + pages:
        assert parse(page, names, memo) == parse(page, names)
    assert "vllm:time_to_first_token_seconds_bucket" not in memo.offsets


def test_a_memo_hint_is_trusted_only_below_the_names_own_header() -> None:
    memo = PageMemo()
    filler = b"".join(b'a{i="%d"} 1\n' % i for i in range(400))  # longer than the hint's slack
    first = b"# TYPE a gauge\n" + filler + b"# TYPE b gauge\nb 2\n"
    assert parse(first, ["b"], memo).samples["b"][0].value == 2.0
    assert memo.offsets["b"] == first.index(b"b 2")
    # Same size, no headers: a "b" line right at the hint is not under b's header, so the whole page
    # is searched and the earlier sample is not skipped.
    bare = b"b 9\n" + filler + b"b 7\n"
    assert [s.value for s in parse(bare, ["b"], memo).samples["b"]] == [9.0, 7.0]
    assert "b" not in memo.offsets
    # b's group moved to the top: nothing after the hint, found by searching again and remembered.
    moved = b"# TYPE b gauge\nb 3\n# TYPE a gauge\n" + filler
    assert [s.value for s in parse(first, ["b"], memo).samples["b"]] == [2.0]
    assert [s.value for s in parse(moved, ["b"], memo).samples["b"]] == [3.0]
    assert memo.offsets["b"] == moved.index(b"b 3")


def test_a_memo_keeps_label_sets_bounded() -> None:
    memo = PageMemo()
    for i in range(2000):
        parse(f'm{{k="{i}"}} 1\n'.encode(), ["m"], memo)
    assert 0 < len(memo.labels) <= 512
    assert parse(b'm{k="v"} 2\n', ["m"], memo).samples["m"] == [Sample({"k": "v"}, 2.0, None)]
