"""Per-target limits: a page over sample_limit, label_limit or label_value_length_limit is refused whole, the
target marked down naming the limit, nothing ingested, and the healthy target beside it diagnosed every cycle."""

from __future__ import annotations

import re
import tracemalloc

import pytest
from prometheus_client.exposition import generate_latest

from kvdoctor.config import Config, TargetSpec, load_config
from kvdoctor.config.schema import Overrides, ScrapeDefaults
from kvdoctor.daemon.runner import Daemon, load_everything
from kvdoctor.ingest.fetch import HttpOptions, ScrapeError, fetch
from kvdoctor.ingest.parse import LimitExceeded, Parser, ScrapeLimits
from kvdoctor.ingest.recording import load_frames
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.conftest import recording_dirs
from tests.faults import SERIES, FaultServer, million_series, refused_url
from tests.support.daemon import watched

FAST = HttpOptions(connect_timeout=0.5, read_timeout=2.0, total_timeout=3.0)


def test_a_million_series_page_is_refused_without_becoming_a_million_objects():
    text = million_series().decode()
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as err:
            Parser().parse(text, ScrapeLimits())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.limit == "sample_limit" and f"{SERIES + 1}" in str(err.value)
    # the page is 16 MB of text; parsing it whole takes ~430 MB, refusing it must take a small fraction of one
    assert peak < 8 * 1024 * 1024, peak


def test_a_page_just_over_the_limit_is_counted_exactly():
    page = "".join(f'x{{i="{i}"}} 1\n\n' for i in range(11))  # blank lines do not count as samples
    assert len(Parser().parse(page, ScrapeLimits(sample_limit=11)).samples) == 11
    with pytest.raises(LimitExceeded, match="more than 10 samples"):
        Parser().parse(page, ScrapeLimits(sample_limit=10))


def test_label_limits_name_the_metric_and_the_limit():
    wide = "w{" + ",".join(f'l{i}="v"' for i in range(10)) + "} 1\n"
    with pytest.raises(LimitExceeded, match=r"label_limit exceeded: w has 11 labels") as err:
        Parser().parse(wide, ScrapeLimits(label_limit=10))
    assert err.value.limit == "label_limit"
    long = 'm{model_name="' + "x" * 300 + '"} 1\n'
    with pytest.raises(LimitExceeded, match=r"m label model_name is 300 characters long, limit 200"):
        Parser().parse(long, ScrapeLimits(label_value_length_limit=200))
    parser = Parser()  # a label set cached under loose limits is checked again under tighter ones
    parser.parse(long, ScrapeLimits(label_value_length_limit=0))
    with pytest.raises(LimitExceeded):
        parser.parse(long, ScrapeLimits(label_value_length_limit=200))
    assert len(Parser().parse(wide + long, ScrapeLimits(0, 0, 0)).samples) == 2  # 0 turns a limit off


def test_the_defaults_fit_every_real_recording_many_times_over():
    frames = [f for d in recording_dirs() for p in sorted(d.glob("*.jsonl*")) for f in load_frames(p)[-1:]]
    assert frames, "no recordings"
    tight = ScrapeLimits(
        sample_limit=ScrapeLimits().sample_limit // 10,
        label_limit=ScrapeLimits().label_limit // 3,
        label_value_length_limit=ScrapeLimits().label_value_length_limit // 10,
    )
    for f in frames:
        if f.text:
            Parser().parse(
                f.text, tight
            )  # raises if a real vLLM page came within 10x (labels 3x) of a default


def test_limits_configured_globally_and_per_target(tmp_path):
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(
        "scrape: {sample_limit: 9000, label_limit: 0, timeout: 4s, max_bytes: 1000000}\n"
        "targets:\n  - http://a:8000\n  - {url: 'http://b:8000', sample_limit: 20, label_value_length_limit: 64}\n"
        "  - {url: 'http://c:8000', sample_limit: -1, label_limit: lots}\n"
    )
    with pytest.raises(ValueError) as err:
        load_config(str(cfg))
    assert f"{cfg}:5: sample_limit: a non-negative integer" in str(err.value)
    assert f"{cfg}:5: label_limit: a non-negative integer" in str(err.value)
    cfg.write_text(cfg.read_text().rsplit("  - {url: 'http://c", 1)[0])
    a, b = load_config(str(cfg)).targets
    assert a.limits == ScrapeLimits(9000, 0, ScrapeDefaults().limits.label_value_length_limit)
    assert b.limits == ScrapeLimits(20, 0, 64)
    assert (a.http.total_timeout, a.http.max_bytes) == (4.0, 1_000_000)


@pytest.fixture
def good(shared_032):
    server = ReplayServer(Playlist([shared_032 / "kv_bound.jsonl.gz"], start_offset_s=40, loop=True)).start()
    yield server
    server.stop()


def test_a_target_over_a_limit_is_down_naming_it_and_nothing_of_it_is_ingested(good):
    faults = {m: FaultServer(m) for m in ("million", "labels")}
    try:
        targets = [TargetSpec(url=good.url, name="good", http=FAST)]
        targets += [TargetSpec(url=f.url, name=m, http=FAST) for m, f in faults.items()]
        d = watched(
            Daemon(Config(targets=targets, interval_s=5.0), load_files(default_rule_files())), "good", good
        )
        for _ in range(3):
            diagnoses = {x.target: x for x in d.cycle()}
        stats = d.state.snapshot().targets
        assert diagnoses["good"].bottleneck == "kv_cache" and stats["good"].up
        assert 300 < (stats["good"].samples or 0) < 1000
        assert stats["million"].up is False and "sample_limit exceeded" in stats["million"].last_error
        assert (
            stats["labels"].up is False
            and "label_limit exceeded: wide has 201 labels" in stats["labels"].last_error
        )
        assert stats["million"].limit_exceeded_total == {"sample_limit": 3}
        assert diagnoses["million"].bottleneck == "unknown"
        assert not list(d.pipeline.store.select("s")) and not list(
            d.pipeline.store.select("wide")
        )  # nothing ingested
        running = [dict(s.labels)["instance"] for s in d.pipeline.store.select("vllm:num_requests_running")]
        assert "labels" not in running and "good" in running
        text = generate_latest(d.registry).decode()
        assert (
            'kvdoctor_target_scrape_limit_exceeded_total{limit="sample_limit",target="million"} 3.0' in text
        )
        assert re.search(r'kvdoctor_target_scrape_samples\{target="good"\} \d{3}\.0', text)
        assert 'kvdoctor_target_scrape_samples{target="million"} 0.0' in text
        d.shutdown()
    finally:
        for f in faults.values():
            f.stop()


def test_a_reload_applies_new_limits_on_the_next_scrape(good, tmp_path):
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(f"interval: 5s\ntargets: [{{url: '{good.url}', name: good}}]\n")
    d = Daemon(*load_everything(str(cfg), Overrides()), str(cfg), Overrides())
    try:
        d.cycle()
        assert d.state.target("good").up
        cfg.write_text(
            f"interval: 5s\nscrape: {{sample_limit: 100, max_connections: 8}}\ntargets: [{{url: '{good.url}', name: good}}]\n"
        )
        ok, message = d.reload()
        assert ok and "scrape changed" in message and "scrape.max_connections changed" in message
        assert d.scraper.max_connections == 8
        d.cycle()
        assert "sample_limit exceeded" in d.state.target("good").last_error
        cfg.write_text(f"interval: 5s\ntargets: [{{url: '{good.url}', name: good, sample_limit: 0}}]\n")
        assert d.reload()[0]
        d.cycle()
        assert d.state.target("good").up
    finally:
        d.shutdown()


def test_yaml_errors_point_at_the_broken_line(tmp_path):
    cfg = tmp_path / "kvdoctor.yml"
    cases = {
        "interval: 2s\ntargets: [http://a:8000\nlisten: x\n": (2, "flow sequence not closed"),
        'interval: 2s\nlisten: "127.0.0.1:1\nretention: 5m\n': (2, "quoted scalar not closed"),
        "targets:\n  - url: http://a:8000\n   name: z\njob: a\n": (3, "expected <block end>"),
    }
    for text, (line, what) in cases.items():
        cfg.write_text(text)
        with pytest.raises(ValueError) as err:
            load_config(str(cfg))
        assert str(err.value).startswith(f"{cfg}:{line}: invalid YAML: ") and what in str(err.value), text


def test_a_failed_scrape_never_shows_the_urls_password():
    url = refused_url().replace("http://", "http://ops:hunter2@")
    with pytest.raises(ScrapeError) as exc:
        fetch(url, HttpOptions(total_timeout=2.0))
    message = str(exc.value)
    assert "hunter2" not in message and "ops:" not in message
    assert message.startswith(url.replace("ops:hunter2@", "")) and "connection refused" in message
