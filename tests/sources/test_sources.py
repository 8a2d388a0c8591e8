"""The Prometheus source: the query client's errors and auth, and one evaluation cycle against a fake Prometheus."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.pipeline import Pipeline
from kvdoctor.sources.client import PromClient, SourceError
from kvdoctor.sources.prometheus import QUERIES, PrometheusEvaluator
from tests.support.fakeprom import (
    GROUPS,
    KV_ALERT,
    fake_fixture,  # noqa: F401  (the `fake` fixture)
    fleet_answer,
    vector,
)


def test_client_parses_vectors_and_scalars_and_sends_auth(fake):
    srv = fake(
        lambda q, h: (
            200,
            vector(({"__name__": "up", "instance": "a"}, 1))
            if q == "up"
            else {"status": "success", "data": {"resultType": "scalar", "result": [1, "NaN"]}},
        )
    )
    opts = HttpOptions(bearer_token="s3cret-token", headers=(("X-Scope-OrgID", "team"),))
    client = PromClient(srv.url + "/", opts)
    assert client.query("up", 1.0) == [({"__name__": "up", "instance": "a"}, 1.0)]
    [(labels, v)] = client.query("scalar(x)", 1.0)
    assert labels == {} and v != v  # NaN
    headers = srv.requests[0][1]
    assert headers["Authorization"] == "Bearer s3cret-token" and headers["X-Scope-OrgID"] == "team"
    assert client.queries_total == 2 and "s3cret" not in repr(client) and "s3cret" not in repr(opts)


def test_client_basic_auth_from_url_is_used_and_never_shown(fake):
    srv = fake(lambda q, h: (401, b"unauthorized"))
    url = srv.url.replace("http://", "http://alice:hunter2@")
    client = PromClient(url)
    with pytest.raises(SourceError) as err:
        client.query("up", 1.0)
    sent = srv.requests[0][1]["Authorization"]
    assert base64.b64decode(sent.split()[1]) == b"alice:hunter2"
    assert "HTTP 401" in str(err.value) and "hunter2" not in str(err.value) and "alice" not in str(err.value)
    assert "hunter2" not in client.base


@pytest.mark.parametrize(
    ("status", "body", "expect"),
    [
        (
            422,
            {"status": "error", "errorType": "execution", "error": "many-to-many matching"},
            "HTTP 422 execution",
        ),
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data: parse error"),
        (503, b"<html>upstream down</html>", "HTTP 503, body is not a JSON object"),
        (200, b"{not json", "body is not a JSON object"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "expected a vector"),
        (
            200,
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
            "malformed",
        ),
    ],
)
def test_client_errors_are_clear(fake, status, body, expect):
    srv = fake(lambda q, h: (status, body))
    with pytest.raises(SourceError, match=expect) as err:
        PromClient(srv.url, HttpOptions(bearer_token="tok-123")).query("rate(x[1m])", 1.0)
    assert srv.url in str(err.value) and "tok-123" not in str(err.value)


def test_client_down_and_bad_url():
    from tests.faults import refused_url

    url = refused_url().rsplit("/", 1)[0]
    with pytest.raises(SourceError, match="cannot connect: connection refused"):
        PromClient(url, HttpOptions(connect_timeout=0.5, read_timeout=0.5)).query("up", 1.0)
    with pytest.raises(SourceError, match="http"):
        PromClient("prometheus:9090")


# --- one evaluation cycle ---------------------------------------------------------------------------


def test_one_cycle_classifies_the_fleet(fake):
    srv = fake(fleet_answer(4))
    ev = PrometheusEvaluator(PromClient(srv.url), Pipeline(GROUPS))
    cycle = ev.evaluate(1000.0)
    by = {d.target: d for d in cycle.diagnoses}
    kv = by["10.0.0.0:8000"]
    assert kv.bottleneck == "kv_cache" and kv.findings[0].name == "kv_cache"
    assert "ttft_p95_s" not in kv.evidence and kv.evidence["kv_usage_max_30s"] == 0.99
    assert kv.findings[0].evidence["kv_cache_tokens"] == 1600.0  # num_gpu_blocks x block_size from Prometheus
    assert (
        by["10.0.0.1:8000"].bottleneck == "unknown" and by["10.0.0.1:8000"].findings[0].name == "target_down"
    )
    assert "up == 0" in by["10.0.0.1:8000"].findings[0].evidence["error"]
    assert by["10.0.0.2:8000"].bottleneck == "healthy" and by["10.0.0.3:8000"].bottleneck == "healthy"
    missing = ev.pipeline.targets["10.0.0.0:8000"].missing
    assert "KV usage" in missing and "running requests" not in missing
    assert ev.discovered["10.0.0.0:8000"].scrape_duration_s == 0.02
    # the alert went through the same state machine: active since the first cycle, still firing later
    cycle2 = ev.evaluate(1015.0)
    [alert] = [a for a in cycle2.evaluation.alerts if a.rule == "VLLMKVCacheBound"]
    assert (
        alert.state == "firing"
        and alert.active_at == 1000.0
        and "KV cache full on 10.0.0.0:8000" in alert.annotations["summary"]
    )


def test_queries_per_cycle_do_not_grow_with_the_fleet(fake):
    counts = {}
    for n in (3, 300):
        srv = fake(fleet_answer(n))
        ev = PrometheusEvaluator(PromClient(srv.url), Pipeline(GROUPS))
        cycle = ev.evaluate(1000.0)
        assert len({d.target for d in cycle.diagnoses}) == n
        counts[n] = (ev.last_cycle_queries, len(srv.requests))
    alerts = sum(r.kind == "alert" for g in GROUPS for r in g.rules)
    assert counts[3] == counts[300] == (len(QUERIES) + alerts,) * 2


def test_targets_that_vanish_are_forgotten_and_a_failed_query_fails_the_cycle(fake):
    state = {"n": 4, "fail": False}

    def answer(q: str, h: dict[str, str]) -> tuple[int, Any]:
        if state["fail"] and q == KV_ALERT.expr:
            return 422, {"status": "error", "errorType": "execution", "error": "boom"}
        return fleet_answer(state["n"])(q, h)

    srv = fake(answer)
    ev = PrometheusEvaluator(PromClient(srv.url), Pipeline(GROUPS))
    ev.evaluate(1000.0)
    state["n"] = 3
    ev.evaluate(1001.0)
    assert "10.0.0.3:8000" not in ev.pipeline.targets
    state["fail"] = True
    before = dict(ev.pipeline.rules.active)
    with pytest.raises(SourceError, match="execution: boom"):
        ev.evaluate(1002.0)
    assert ev.pipeline.rules.active == before  # a failed cycle resolves nothing


def test_an_answer_too_large_or_too_slow_is_refused_not_read_to_the_end(fake):
    # a broken or hostile Prometheus: an endless body would have been read whole into memory, a dripping one for ever
    big = {"status": "success", "data": {"resultType": "vector", "result": [], "pad": "x" * 200_000}}
    srv = fake(lambda q, h: (200, big))
    client = PromClient(srv.url)
    assert client.query("up", 1.0) == []  # within the bounds an operator's fleet needs, the answer is read
    client.max_bytes = 100_000
    with pytest.raises(SourceError, match=r"answer larger than 100,000 bytes: not read") as err:
        client.query("up", 1.0)
    assert srv.url in str(err.value)
    client.max_bytes, client.deadline_s = (
        10**9,
        0.0,
    )  # past its deadline by the first chunk: a drip is cut the same
    with pytest.raises(SourceError, match=r"answer not complete after 0s: not read"):
        client.query("up", 1.0)
