"""`kvdoctor whatif` on a recording, a live replayed server and a real Prometheus; bad input exits 2."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from kvdoctor.cli import common, main
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.whatif import advisor
from kvdoctor.whatif.breaks import restarts, stalls
from kvdoctor.whatif.sources import MIN_LEVEL_S, default_window, recording_snaps
from tests.support.clock import SteppedClock
from tests.support.openmetrics import recordings_to_openmetrics
from tests.support.prometheus import PrometheusServer, backfill, binaries
from tests.support.whatif_json import Q_KEYS, SATURATION_KEYS

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
BEFORE = PAIRS / "batchcap_before.jsonl.gz"
RESTART = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.8.5-cpu"  # a steady load through a restart
RECORDINGS = Path(__file__).parents[1] / "fixtures/recordings"
# loads whose level never holds 30 s at their end: bursts of 15-57 in flight; an open loop wandering 1-9
BURSTY = [
    RECORDINGS / "vllm-0.32-cpu-field/busy.jsonl.gz",
    RECORDINGS / "vllm-0.32-cpu-whatif2/llama_loadx2_before.jsonl.gz",
]


def test_json_has_the_documented_shape_and_the_change_shows(capsys):
    assert main(["whatif", str(BEFORE), "--set", "max_num_seqs=12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {
        "measured",
        "predicted_unchanged",
        "predicted_unchanged_p10",
        "predicted_unchanged_p90",
        "predicted",
        "predicted_p10",
        "predicted_p90",
        "interval",
        "not_reproduced",
        "workload",
        "engine",
        "step_model",
        "assumptions",
    }
    assert doc["engine"]["now"]["max_num_seqs"] == 4 and doc["engine"]["after"]["max_num_seqs"] == 12
    assert set(doc["measured"]) == Q_KEYS
    for q in ("predicted_unchanged", "predicted"):
        assert set(doc[q]) == Q_KEYS | SATURATION_KEYS
        assert doc[q]["overloaded"] is False  # a closed loop's queue is bounded by its clients
    assert doc["workload"]["kind"] == "closed" and doc["workload"]["engine_shares"] == []  # one engine
    assert doc["predicted"]["running"] > 2 * doc["predicted_unchanged"]["running"]
    assert doc["predicted"]["ttft_p50_s"] < doc["predicted_unchanged"]["ttft_p50_s"]
    assert doc["predicted"]["itl_p50_s"] > doc["predicted_unchanged"]["itl_p50_s"]
    assert any("max_num_seqs 4" in a for a in doc["assumptions"])
    assert "after: max_num_seqs 12," in doc["assumptions"][-1]
    assert doc["not_reproduced"] == []  # the window's own prediction gives back what it measured


def test_a_window_the_model_does_not_reproduce_is_told(capsys):
    # a V0 engine (0.8.5 on CPU) prefills in steps of its own: the V1 simulation makes 3x the tokens it served
    v0 = RESTART / "kv_bound.jsonl.gz"
    assert main(["whatif", str(v0), "--set", "load=x1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    missed = doc["not_reproduced"]
    assert any(re.fullmatch(r"tokens/s [\d.]+ predicted against [\d.]+ measured", m) for m in missed), missed
    measured = doc["measured"]["generation_tokens_per_s"]
    assert doc["predicted_unchanged"]["generation_tokens_per_s"] > 1.5 * measured
    assert main(["whatif", str(v0), "--set", "load=x1"]) == 0
    text = capsys.readouterr().out
    assert "the window itself is not reproduced: " + "; ".join(missed) in text


def test_text_output_is_side_by_side(capsys):
    assert (
        main(["whatif", str(BEFORE), "--window", "30:68", "--set", "max_num_seqs=12", "--set", "load=x1.2"])
        == 0
    )
    out = capsys.readouterr().out
    assert "measured now" in out and "predicted unchanged" in out and "predicted after" in out
    assert "window 30-68 s" in out
    for label in ("TTFT p50", "ITL p95", "Queue time p95", "Generation tokens/s", "KV usage peak", "Class"):
        assert label in out
    assert "traffic ×1.2 (more clients)" in out


def test_throughput_above_a_thousand_is_written_out_not_in_exponent_notation(shared_032, capsys):
    assert main(["whatif", str(shared_032 / "batch_cap.jsonl.gz"), "--set", "max_num_seqs=12"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("Generation tokens/s"))
    assert "e+0" not in out
    cells = [c for c in row.split()[2:] if not c.startswith("(")]  # the values, not their 80 % intervals
    assert any(float(cell.replace(",", "")) >= 1000 for cell in cells), row


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "max_num_sequences=12"], "unknown knob 'max_num_sequences'"),
        (["--set", "max_num_seqs=0"], "max_num_seqs must be a positive whole number"),
        (["--set", "max_num_seqs=4096"], "above max_num_batched_tokens"),
        (["--set", "gpu_memory_utilization=0.95"], "needs --gpu"),
        ([], "at least one change"),
        (["--set", "load=2", "--window", "0:5"], "needs at least 5"),
        (["--set", "load=2", "--window", "9:1"], "FROM < TO"),
        (["--set", "load=2", "--window", "0:5.9"], "the what-if needs at least 5"),
    ],
)
def test_bad_input_exits_two_naming_the_flag_or_window(argv, message, capsys):
    assert main(["whatif", str(BEFORE), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvdoctor whatif: ") and message in err, err


def test_a_window_across_a_restart_is_refused(capsys):
    assert main(["whatif", str(PAIRS / "batchcap_restart.jsonl.gz"), "--set", "load=2", "--json"]) == 0
    capsys.readouterr()
    assert (
        main(["whatif", str(PAIRS / "batchcap_restart.jsonl.gz"), "--window", "0:200", "--set", "load=2"])
        == 2
    )
    assert "spans an engine restart" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["whatif", "--set", "load=x1.5"], ["plan", "--slo", "ttft_p95=20s"]])
def test_the_default_window_is_the_configuration_running_at_the_end(command, capsys):
    """A steady load that held across a restart: the window is learnt after it, not refused as spanning it."""
    rec = RESTART / "restart.jsonl.gz"
    snaps = recording_snaps(rec)
    restarted = snaps[restarts(snaps)[-1]].t - snaps[0].t
    assert main([command[0], str(rec), *command[1:]]) in (0, 1)
    start = re.search(r"window (\d+)-\d+ s", capsys.readouterr().out)
    assert start and int(start.group(1)) >= restarted, start


def test_the_measured_class_costs_no_simulation_of_advice_the_whatif_does_not_show(
    shared_032, capsys, monkeypatch
):
    """The measured class comes from a replay; the effects of that replay's advice are never printed, so only
    the whatif's own prediction is simulated with intervals."""
    asked: list[dict] = []
    real = advisor.predict
    monkeypatch.setattr(advisor, "predict", lambda *a, **kw: asked.append(kw) or real(*a, **kw))
    assert main(["whatif", str(shared_032 / "kv_bound.jsonl.gz"), "--set", "max_num_seqs=12"]) == 0
    assert re.search(r"^Class\s+kv_cache\s+kv_cache\s+kv_cache$", capsys.readouterr().out, re.M)
    assert not [kw for kw in asked if kw.get("with_intervals", True)]


@pytest.mark.parametrize("command", [["whatif", "--set", "load=x2"], ["plan", "--slo", "ttft_p95=2s"]])
def test_an_idle_recording_is_refused_as_idle_not_as_a_window_the_user_never_gave(command, capsys):
    rec = RESTART / "idle.jsonl.gz"
    assert main([command[0], str(rec), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvdoctor {command[0]}: no request ran or waited") and "idle" in err, err
    assert "window" not in err


def test_missing_recording_exits_two(tmp_path, capsys):
    assert main(["whatif", str(tmp_path / "nope.jsonl.gz"), "--set", "load=2"]) == 2
    assert "no such recording" in capsys.readouterr().err


def test_live_server_is_sampled_like_check(shared_032, capsys, monkeypatch):
    clock = SteppedClock()  # 8 s of sampling at 1 s without waiting them: the server plays on the same clock
    monkeypatch.setattr(common, "CLOCK", clock)
    playlist = Playlist([shared_032 / "batch_cap.jsonl.gz"], start_offset_s=60)
    server = ReplayServer(playlist, clock=clock).start()
    try:
        code = main(
            [
                "whatif",
                server.url,
                "--duration",
                "8",
                "--interval",
                "1",
                "--set",
                "max_num_seqs=8",
                "--max-num-seqs",
                "4",
                "--json",
            ]
        )
    finally:
        server.stop()
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["measured"]["running"] == pytest.approx(4, abs=0.5)
    assert doc["predicted"]["running"] > doc["predicted_unchanged"]["running"]


def test_prometheus_target(tmp_path, capsys):
    found = binaries()
    if found is None:
        pytest.skip("prometheus/promtool not on PATH")
    frames = [json.loads(x) for x in __import__("gzip").open(BEFORE, "rt")]
    shift = time.time() - 120 - frames[-1]["t"]  # the recording ends two minutes ago
    om = tmp_path / "rec.om"
    recordings_to_openmetrics([(str(BEFORE), "gpu-1:8000", shift)], om)
    storage = tmp_path / "tsdb"
    backfill(om, storage, promtool=found[1])
    with PrometheusServer(storage, tmp_path, binary=found[0]) as prom:
        code = main(
            [
                "whatif",
                "--prometheus-url",
                prom.url,
                "--target",
                "gpu-1:8000",
                "--duration",
                "10m",
                "--interval",
                "1",
                "--set",
                "max_num_seqs=12",
                "--json",
            ]
        )
        out = capsys.readouterr()
        assert code == 0, out.err
        doc = json.loads(out.out)
        assert doc["workload"]["kind"] == "closed"
        assert doc["predicted"]["ttft_p50_s"] < doc["predicted_unchanged"]["ttft_p50_s"]
        assert main(["whatif", "--prometheus-url", prom.url, "--target", "nobody:1", "--set", "load=2"]) == 2
        assert "no vllm:* series for instance 'nobody:1'" in capsys.readouterr().err


@pytest.mark.parametrize("rec", BURSTY, ids=lambda p: p.name)
def test_a_bursty_recording_is_learned_over_its_busy_period_not_refused(rec, capsys):
    snaps = recording_snaps(rec)
    lo, hi = default_window(snaps)  # the daemon's steady stretch: too short to learn from, so it waits
    assert hi - lo < MIN_LEVEL_S
    assert main(["whatif", str(rec), "--set", "load=x1.5"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"window (\d+)-(\d+) s", out)
    assert found, out
    start, end = map(float, found.groups())
    assert end - start >= MIN_LEVEL_S and "predicted" in out.lower()


def test_gpu_memory_utilization_on_a_cpu_server_says_what_sizes_its_cache_and_what_to_ask(capsys):
    rec = (
        RECORDINGS / "vllm-0.10.2-cpu/batch_cap.jsonl.gz"
    )  # cache_config_info: cpu_kvcache_space_bytes 1 GiB
    assert main(["whatif", str(rec), "--set", "gpu_memory_utilization=0.95", "--gpu", "H100"]) == 2
    err = capsys.readouterr().err
    assert "sized by VLLM_CPU_KVCACHE_SPACE (1 GiB here)" in err and "not by --gpu-memory-utilization" in err
    assert "ask kv_cache_tokens=N instead (the cache holds 262144 tokens now)" in err
    assert main(["whatif", str(rec), "--set", "kv_cache_tokens=131072"]) == 0  # … which it then answers


def test_a_stalled_engine_is_not_learned_from_and_a_window_over_the_stall_says_so(capsys):
    # the EngineCore was SIGSTOPped for 65 s with 4 requests in flight (labels.json), then the load ended 8 s on
    wedge = RECORDINGS / "vllm-0.32-cpu-field/wedge.jsonl.gz"
    snaps = recording_snaps(wedge)
    [(a, b)] = stalls(snaps)
    assert 60 <= snaps[b - 1].t - snaps[a].t <= 70
    assert main(["whatif", str(wedge), "--set", "load=x1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["not_reproduced"] == []
    )  # learned from the load before the stall: its own prediction gives it back
    assert not any("stalled" in a for a in doc["assumptions"])
    over = f"0:{snaps[-1].t - snaps[0].t:.0f}"
    assert main(["whatif", str(wedge), "--window", over, "--set", "load=x1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(re.match(r"the engine stalled 6\d s in the window", a) for a in doc["assumptions"])
    assert any(m.startswith("tokens/s") for m in doc["not_reproduced"])
