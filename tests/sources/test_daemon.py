"""`kvdoctor serve --source prometheus`: the daemon's sinks fed by the Prometheus source, its flags and failures."""

from __future__ import annotations

import argparse
import logging

import pytest
from prometheus_client import generate_latest

from kvdoctor.cli import build_parser
from kvdoctor.cli.serve import overrides
from kvdoctor.config import Config, ConfigError, TargetSpec
from kvdoctor.config.schema import PrometheusSource
from kvdoctor.daemon.runner import Daemon
from kvdoctor.ingest.fetch import HttpOptions
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import VERDICTS
from tests.support.daemon import Daemons
from tests.support.fakeprom import fake_fixture, fleet_answer  # noqa: F401  (the `fake` fixture)
from tests.support.logs import kvdoctor_said


def _daemon(daemons: Daemons, url: str, tmp_path, **kw) -> Daemon:
    cfg = Config(
        source="prometheus",
        prometheus=PrometheusSource(url, HttpOptions(bearer_token="tok-xyz")),
        state_file=str(tmp_path / "state.json"),
        **kw,
    )
    return daemons(cfg, load_files(default_rule_files()))


def test_daemon_publishes_diagnoses_targets_and_source_metrics(fake, daemons, tmp_path):
    srv = fake(fleet_answer(3))
    spec = TargetSpec(
        url="http://10.0.0.0:8000/metrics", max_num_seqs=64, slo_itl_p95_s=0.1, labels={"team": "a"}
    )
    d = _daemon(daemons, srv.url, tmp_path, targets=[spec])
    assert spec.name == "10.0.0.0:8000"
    diagnoses = {x.target: x.bottleneck for x in d.cycle()}
    assert diagnoses == {"10.0.0.0:8000": "kv_cache", "10.0.0.1:8000": "unknown", "10.0.0.2:8000": "healthy"}
    snap = d.state.snapshot()
    assert snap.ready and {t: s.up for t, s in snap.targets.items()} == {
        "10.0.0.0:8000": True,
        "10.0.0.1:8000": False,
        "10.0.0.2:8000": True,
    }
    assert snap.targets["10.0.0.0:8000"].labels == {"job": "vllm", "team": "a"}
    assert "up == 0" in snap.targets["10.0.0.1:8000"].last_error
    text = generate_latest(d.registry).decode()
    n = d.source.status().last_cycle_queries
    assert f"kvdoctor_source_cycle_queries {float(n)}" in text and "kvdoctor_source_up 1.0" in text
    assert f"kvdoctor_source_queries_total {float(n)}" in text
    code = float(VERDICTS.index("kv_cache"))
    assert f'kvdoctor_bottleneck_code{{model_name="m",target="10.0.0.0:8000"}} {code}' in text
    # config facts go out for Prometheus to read back (kvdoctor:batch_cap:configured, the SLO rules)
    assert 'kvdoctor_target_max_num_seqs{target="10.0.0.0:8000"} 64.0' in text
    assert 'kvdoctor_target_slo_seconds{slo="itl_p95",target="10.0.0.0:8000"} 0.1' in text
    assert "tok-xyz" not in text
    assert (tmp_path / "state.json").exists() and "VLLMKVCacheBound" in (tmp_path / "state.json").read_text()


def test_prometheus_down_fails_the_cycle_keeps_the_last_diagnoses_and_recovers(
    fake, daemons, tmp_path, caplog
):
    state = {"down": False}

    def answer(q, h):
        if state["down"]:
            return 502, b"bad gateway"
        return fleet_answer(3)(q, h)

    srv = fake(answer)
    d = _daemon(daemons, srv.url, tmp_path)
    first = d.cycle()
    state["down"] = True
    with caplog.at_level(logging.DEBUG, logger="kvdoctor"):
        assert d.cycle() == [] and d.cycle() == []
    errors = kvdoctor_said(caplog.records, logging.ERROR)
    assert len(errors) == 1 and "HTTP 502" in errors[0] and "tok-xyz" not in caplog.text
    status = d.source.status()
    assert status.ok is False and status.failures_total == 2
    assert [x.target for x in d.state.snapshot().diagnoses] == [x.target for x in first]
    text = generate_latest(d.registry).decode()
    assert "kvdoctor_source_up 0.0" in text and "kvdoctor_source_cycle_failures_total 2.0" in text
    state["down"] = False
    assert d.cycle() and d.source.status().ok is True


def test_alert_state_survives_a_restart(fake, daemons, tmp_path):
    srv = fake(fleet_answer(3))
    d = _daemon(daemons, srv.url, tmp_path)
    d.cycle()
    since = {a.rule: a.active_at for a in d.pipeline.rules.active.values()}
    again = _daemon(daemons, srv.url, tmp_path)
    assert {a.rule: a.active_at for a in again.pipeline.rules.active.values()} == since


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_serve_flags_build_the_prometheus_section(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-abc\n")
    pw = tmp_path / "pw"
    pw.write_text("pw-123")
    out = overrides(
        _args(
            "--prometheus-url",
            "https://prom:9090/",
            "--prometheus-bearer-token-file",
            str(token),
            "--prometheus-basic-auth-user",
            "bob",
            "--prometheus-basic-auth-password-file",
            str(pw),
            "--prometheus-header",
            "X-Scope-OrgID: tenant-1",
            "--prometheus-ca-file",
            "/ca.pem",
            "--prometheus-timeout",
            "30s",
        )
    )
    prom = out.prometheus
    assert prom is not None and out.source == "prometheus" and prom.url == "https://prom:9090/"
    h = prom.http
    assert (h.bearer_token, h.basic_auth, h.verify, h.read_timeout) == (
        "tok-abc",
        ("bob", "pw-123"),
        "/ca.pem",
        30.0,
    )
    assert h.headers == (("X-Scope-OrgID", "tenant-1"),)
    insecure = overrides(_args("--prometheus-url", "http://p:9090", "--prometheus-insecure-skip-verify"))
    assert insecure.prometheus.http.verify is False
    assert overrides(_args("--target", "gpu:8000")).source is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prometheus-bearer-token-file", "/x"], "needs --prometheus-url"),
        (["--prometheus-url", "http://p", "--prometheus-bearer-token-file", "/nonexistent"], "cannot read"),
        (["--prometheus-url", "http://p", "--prometheus-header", "novalue"], "NAME:VALUE"),
        (["--prometheus-url", "http://p", "--prometheus-cert-file", "/c"], "go together"),
        (["--prometheus-url", "http://p", "--prometheus-timeout", "soon"], "not a duration"),
    ],
)
def test_serve_flag_errors(argv, message):
    with pytest.raises(ConfigError, match=message):
        overrides(_args(*argv))


def test_serve_exits_2_without_a_prometheus_url(capsys):
    from kvdoctor.cli import main

    assert main(["serve", "--source", "prometheus", "--listen", "127.0.0.1:0"]) == 2
    assert "needs --prometheus-url" in capsys.readouterr().err
