"""The command line as a user runs it: query, replay and check on real recordings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from kvdoctor.cli import common, main
from kvdoctor.replayserver import Playlist, ReplayServer
from tests.support.clock import SteppedClock


@pytest.fixture
def kv_bound(shared_032):
    return str(shared_032 / "kv_bound.jsonl.gz")


def test_query_json_is_prometheus_api_data(kv_bound, capsys):
    assert main(["query", kv_bound, "vllm:kv_cache_usage_perc", "--time", "+80", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["resultType"] == "vector"
    (item,) = data["result"]
    assert item["metric"]["__name__"] == "vllm:kv_cache_usage_perc"
    assert item["metric"]["instance"] == "kv_bound" and item["metric"]["job"] == "vllm"
    assert 0.0 <= float(item["value"][1]) <= 1.0


def test_query_several_expressions_print_a_list_in_order(kv_bound, capsys):
    assert (
        main(
            [
                "query",
                kv_bound,
                "time()",
                "sum(rate(vllm:num_preemptions_total[1m]))",
                "--time",
                "+100",
                "--json",
            ]
        )
        == 0
    )
    scalar, vector = json.loads(capsys.readouterr().out)
    assert scalar["resultType"] == "scalar" and vector["resultType"] == "vector"
    assert float(vector["result"][0]["value"][1]) > 0  # kv_bound preempts


def test_query_table_and_bad_expression(kv_bound, capsys):
    assert main(["query", kv_bound, "vllm:num_requests_running", "--time", "+80"]) == 0
    out = capsys.readouterr().out
    assert 'vllm:num_requests_running{engine="0", instance="kv_bound"' in out
    assert main(["query", kv_bound, "sum(rate(vllm:x[5m])"]) == 2
    err = capsys.readouterr().err
    assert "unclosed left parenthesis" in err and "column 4" in err


def test_query_missing_recording_is_a_usage_error(tmp_path, capsys):
    assert main(["query", str(tmp_path / "nope.jsonl"), "up"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_replay_json_timeline(kv_bound, capsys):
    assert main(["replay", kv_bound, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    timeline = doc["timeline"]
    assert {"t", "target", "model_name", "bottleneck", "findings", "evidence"} <= set(timeline[0])
    late = [e for e in timeline if e["t"] >= timeline[0]["t"] + 60]
    assert late and all(e["bottleneck"] == "kv_cache" for e in late)
    assert "preemption_storm" in late[-1]["findings"]
    assert late[-1]["evidence"]["kv_usage_max_1m"] >= 0.9


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_replay_prints_changes_with_advice_numbers(kv_bound, capsys):
    assert main(["replay", kv_bound]) == 0
    out = capsys.readouterr().out
    assert "kv_cache (was " in out
    assert "`--kv-cache-dtype fp8` doubles the cache from 4,096 to 8,192 tokens" in out
    assert out.count("kv_cache (was") == 1  # one change into the state, not one line per evaluation


def test_check_against_a_replayed_vllm_prints_class_and_advice(shared_032, capsys, monkeypatch):
    clock = SteppedClock()  # 17 s of sampling without waiting them: the server plays on the same clock
    monkeypatch.setattr(common, "CLOCK", clock)
    server = ReplayServer(
        Playlist([shared_032 / "batch_cap.jsonl.gz"], start_offset_s=40), clock=clock
    ).start()
    try:  # a verdict needs a 15 s window
        code = main(["check", server.url, "--duration", "17", "--interval", "1"])
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert code == 1
    assert ": BATCH_CAP" in out
    assert "raise `--max-num-seqs` from 4" in out


def test_check_healthy_exits_zero_and_dead_target_exits_three(shared_032, capsys, monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(common, "CLOCK", clock)
    server = ReplayServer(Playlist([shared_032 / "healthy.jsonl.gz"], start_offset_s=30), clock=clock).start()
    try:
        assert main(["check", server.url, "--duration", "17", "--interval", "1", "--json"]) == 0
    finally:
        server.stop()
    doc = json.loads(capsys.readouterr().out)
    assert doc["diagnoses"][0]["bottleneck"] == "healthy"
    assert main(["check", "http://127.0.0.1:9/metrics", "--duration", "1", "--interval", "0.5"]) == 3
    err = capsys.readouterr().err
    assert "no successful scrape" in err and "shorter than the 15 s window" in err


def test_replay_refuses_a_zero_interval_instead_of_looping(kv_bound, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["replay", kv_bound, "--interval", "0"])
    assert exc.value.code == 2
    assert "--interval: must be above zero" in capsys.readouterr().err


@pytest.mark.slow  # over 10 s on this 2-core machine (scripts/test.sh runs it)
def test_replay_names_an_unwritable_export_file(kv_bound, tmp_path, capsys):
    out = tmp_path / "missing-dir" / "out.om"
    assert main(["replay", kv_bound, "--export-openmetrics", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--export-openmetrics {out}: No such file or directory" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "Qwen3-8b-typo"], "--model: unknown model 'Qwen3-8b-typo'; known: Qwen3-8B"),
        (["--gpu", "H1OO"], "--gpu: unknown GPU 'H1OO'; known:"),
        (
            ["--bearer-token-file", "/nonexistent/token"],
            "--bearer-token-file /nonexistent/token: No such file",
        ),
    ],
)
def test_check_refuses_bad_flags_before_scraping(flags, message, capsys):
    assert main(["check", "http://127.0.0.1:9/metrics", "--duration", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "no successful scrape" not in err


def test_check_refuses_a_non_positive_max_num_seqs_and_interval(capsys):
    for flags in (["--max-num-seqs", "0"], ["--interval", "0s"]):
        with pytest.raises(SystemExit) as exc:
            main(["check", "http://127.0.0.1:9/metrics", *flags])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--max-num-seqs: must be at least 1" in err and "--interval: must be above zero" in err


def test_replay_server_names_a_bad_or_busy_listen_address(kv_bound, capsys):
    assert main(["replay-server", kv_bound, "--listen", "localhost"]) == 2
    assert "--listen 'localhost': expected HOST:PORT" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        addr = f"127.0.0.1:{busy.getsockname()[1]}"
        assert main(["replay-server", kv_bound, "--listen", addr]) == 2
    assert f"--listen {addr}: Address already in use" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["serve", "--target", "http://127.0.0.1:9/metrics"], ["demo"]])
def test_a_malformed_listen_flag_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--listen", "localhost"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--listen" in err and ": expected HOST:PORT, got 'localhost'" in err


def test_serve_names_a_missing_web_config_instead_of_a_traceback(tmp_path):
    missing = tmp_path / "web.yml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvdoctor",
            "serve",
            "--target",
            "http://127.0.0.1:9/metrics",
            "--listen",
            "127.0.0.1:0",
            "--web-config",
            str(missing),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"kvdoctor serve: {missing}: No such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_command_on_a_recording_never_loads_the_http_and_slack_clients(kv_bound):
    # a third of whatif's start-up was aiohttp, requests and slack_sdk, none of which reading a file needs
    code = (
        "import sys\n"
        "from kvdoctor.cli import main\n"
        f"code = main(['whatif', {str(kv_bound)!r}, '--set', 'max_num_seqs=16'])\n"
        "print(code, sorted(m for m in ('aiohttp', 'requests', 'slack_sdk') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"


def test_the_help_still_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("whatif", "plan", "serve", "report", "notify", "replay-server"))
    with pytest.raises(SystemExit):
        main(["whatif", "--help"])
    assert "--set NAME=VALUE" in capsys.readouterr().out
