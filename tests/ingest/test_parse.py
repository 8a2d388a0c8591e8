"""The fast parser gives prometheus-client's samples on real vLLM expositions and names bad lines."""

from __future__ import annotations

import gc
import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvdoctor.ingest.parse import Keep, ParseError, Parser, parse
from kvdoctor.ingest.recording import load_frames
from kvdoctor.samples import Sample
from tests.conftest import recording_dirs


def reference(text: str) -> list[tuple]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out.append((s.name, tuple(s.labels.items()), s.value))
    return out


def ours(text: str, parser: Parser | None = None) -> list[tuple]:
    scrape = (parser or Parser()).parse(text)
    return [(s.name, s.labels, s.value) for s in scrape.samples]


def _same(a: list[tuple], b: list[tuple]) -> bool:
    key = lambda x: (x[0], x[1])  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    if [key(x) for x in a] != [key(x) for x in b]:
        return False
    return all(x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2])) for x, y in zip(a, b, strict=True))


def real_recordings():
    files = [f for d in recording_dirs() for f in sorted(d.glob("*.jsonl*"))]
    if not files:
        pytest.skip("no recordings available")
    return files


@pytest.mark.slow  # every scrape of every recording through both parsers: ~40 s
def test_same_samples_as_prometheus_client_on_every_real_recording():
    checked = 0
    for path in real_recordings():
        parser = Parser()  # warm cache across frames, as in the daemon
        frames = [f for f in load_frames(path) if f.text]
        for frame in frames[:: max(1, len(frames) // 12)]:
            # prometheus-client's parser is most of this test's time: once a frame
            want = reference(frame.text)
            assert _same(ours(frame.text, parser), want), f"{path.name} at t={frame.t}"
            assert _same(ours(frame.text), want)
            checked += 1
    assert checked >= 12


def test_created_series_are_dropped_and_types_kept():
    text = (
        "# HELP vllm:prompt_tokens_total Number of prefill tokens.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        'vllm:prompt_tokens_total{engine="0",model_name="m"} 12.0\n'
        "# TYPE vllm:prompt_tokens_created gauge\n"
        'vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e9\n'
    )
    scrape = parse(text)
    assert [s.name for s in scrape.samples] == ["vllm:prompt_tokens_total"]
    assert scrape.types["vllm:prompt_tokens_total"] == "counter"


def test_escapes_special_values_and_timestamps():
    text = (
        'a{path="C:\\\\dir",q="say \\"hi\\"",nl="x\\ny"} NaN\n'
        "b +Inf 1700000000000\n"
        'c{le="0.5",} -Inf\n'
        "d{} 3.5e-3\n"
    )
    assert _same(ours(text), reference(text))
    s = parse(text).samples
    assert dict(s[0].labels) == {"path": "C:\\dir", "q": 'say "hi"', "nl": "x\ny"}
    assert s[1].value == math.inf and s[1].timestamp_ms == 1700000000000
    assert s[2].value == -math.inf


def test_a_line_seen_before_is_read_again_as_it_is_now():
    parser = Parser()
    first = 'vllm:num_requests_running{engine="0"} 3\nvllm:x_total{le="1"} 5\nup 1\n'
    assert ours(first, parser) == reference(first)
    # the same series with new values: numbers, special values, a timestamp where there was none
    again = 'vllm:num_requests_running{engine="0"} NaN\nvllm:x_total{le="1"} 1e3 1700000000000\nup +Inf\n'
    assert _same(ours(again, parser), reference(again))
    assert parser.parse(again).samples[1].timestamp_ms == 1700000000000
    # a value that is not a number is named as on a first sight, whatever the parser saw before
    for bad in ('vllm:x_total{le="1"} one\n', 'vllm:x_total{le="1"} 1_000\n', 'vllm:x_total{le="1"} 1 2 3\n'):
        with pytest.raises(ParseError) as warm:
            parser.parse(first + bad)
        with pytest.raises(ParseError) as cold:
            parse(first + bad)
        assert str(warm.value) == str(cold.value) and warm.value.lineno == 4


def test_families_not_kept_are_counted_checked_and_left_out():
    page = 'vllm:num_requests_running{engine="0"} 3\nhttp_requests_total{handler="/metrics"} 9\nmine 1\n'
    keep = Keep(frozenset({"mine"}), ("vllm:",))
    parser = Parser()
    for _ in range(2):  # the first parse and a warm one agree
        scrape = parser.parse(page, keep=keep)
        assert [s.name for s in scrape.samples] == ["vllm:num_requests_running", "mine"]
        assert scrape.dropped == 1
    with pytest.raises(ParseError, match="line 2"):  # a family left out is still a line of the page
        parser.parse(page.replace(" 9", " nine"), keep=keep)
    wider = Keep(frozenset({"mine", "http_requests_total"}), ("vllm:",))  # a reload's rules read it
    assert parser.parse(page, keep=wider).samples[1] == (
        "http_requests_total",
        (("handler", "/metrics"),),
        9.0,
        None,
    )


def test_a_page_waiting_for_the_cycle_leaves_the_collector_nothing_to_track():
    # The daemon's pages wait for the cycle in the scraper's inbox. What the collector still tracks by then is
    # promoted to the oldest generation and sets off full collections of the fleet's heap; a Sample (a tuple
    # subclass) is never untracked, a plain tuple of strings and numbers is at the collector's first pass.
    page = (
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 3\n'
        + "".join(f'vllm:e2e_request_latency_seconds_bucket{{le="{le}"}} {i}\n' for i, le in enumerate("125"))
        + "up 1\n"
    )
    parser = Parser()
    parser.read(page)
    # the label sets the first page made are old now, as in a daemon past its first scrapes (a tuple is untracked
    # once what it holds is: a label set at the pass after its pairs)
    gc.collect()
    gc.collect()
    waiting = parser.read(page.replace(" 3", " 4"))
    gc.collect(0)
    assert len(waiting.rows) == 5 and not any(gc.is_tracked(row) for row in waiting.rows)
    # taken at ingest, it is the page parse() reads, as Samples
    scrape = waiting.scrape()
    assert scrape == parser.parse(page.replace(" 3", " 4")) and scrape.types == {
        "vllm:num_requests_running": "gauge"
    }
    assert {type(s) for s in scrape.samples} == {Sample} and scrape.samples[0].value == 4.0


@pytest.mark.parametrize(
    ("text", "lineno"),
    [
        ("ok 1\nbad{a=b} 1\n", 2),
        ('ok 1\n# comment\nx{a="1" 2\n', 3),
        ('x{a="1",a="2"} 1\n', 1),
        ("x 1 2 3\n", 1),
        ("x one\n", 1),
        ("1x 1\n", 1),
        ('ok 1\nvllm:num_requests_running{engine="0",model_na', 2),
    ],
)
def test_garbled_lines_are_refused_naming_the_line(text, lineno):
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.lineno == lineno
    assert f"line {lineno}" in str(err.value)
