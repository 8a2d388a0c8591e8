"""What a target's impossible numbers can make a simulation do: finish, or fail saying why, and never run forever.

A fuzzed recording found both: an output-length histogram poisoned into 2,000-4,000 tokens against a 2,048-token
limit left twenty closed-loop clients without think time re-sending refused requests at one instant for ever, and an
ITL `_count` of ~1e28 fitted a step of 1e-30 s that the simulation stepped through without end. Either held the
daemon's one simulation child, and with it every other target's predictions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.whatif import sim
from kvdoctor.whatif.arrivals import MAX_REFUSALS
from kvdoctor.whatif.model import Engine, LengthDist, StepModel, Workload
from kvdoctor.whatif.sim import Simulator
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.steprows import MAX_STEP_S, MIN_STEP_S, history_rows
from kvdoctor.whatif.workload import WindowError
from tests.notify_support.recordings import read_frames, write

CLOSED = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-0.32-cpu-ramps/tiny_ramp_c8.jsonl.gz"
STEP = StepModel(c0=0.01, c_decode=0.001, c_prefill=1e-4)


def test_closed_loop_clients_whose_every_request_is_refused_stop_and_the_run_ends() -> None:
    too_long = LengthDist.fixed(3000)  # prompt + output over max_model_len: vLLM answers 400 at once
    w = Workload("closed", 0.0, 20, 0.0, LengthDist.fixed(100), too_long)
    res = Simulator(Engine(max_model_len=2048), STEP).run_workload(w, 600.0, 30.0, seed=1)
    assert res.finished == 0 and res.generation_tokens == 0
    assert res.rejected == 20 * MAX_REFUSALS  # each client gave up after as many refusals in a row


def test_a_client_refused_now_and_then_goes_on_sending() -> None:
    # half the outputs fit: refusals in a row stay short, so no client gives up and the loop serves the rest
    half = LengthDist(((1.0, 100.0, 0.5), (2500.0, 3000.0, 1.0)), 1400.0)
    w = Workload("closed", 0.0, 4, 0.0, LengthDist.fixed(100), half)
    res = Simulator(Engine(max_model_len=2048), STEP).run_workload(w, 120.0, 10.0, seed=1)
    assert res.finished > 100 and res.rejected > 100


def test_a_step_model_no_engine_has_is_refused_before_it_runs_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sim, "MAX_STEPS", 20_000)
    w = Workload("closed", 0.0, 4, 0.0, LengthDist.fixed(100), LengthDist.fixed(50))
    with pytest.raises(WindowError, match="no engine's; are the ITL histogram's _count and _sum right"):
        Simulator(Engine(), StepModel(c0=1e-30, c_decode=0.0, c_prefill=0.0)).run_workload(
            w, 600.0, 30.0, seed=1
        )


def _rewritten(src: Path, dst: Path, edit: Callable[[str], str], from_frame: int = 0) -> None:
    """The recording with each page's text edited, from the from_frame-th page on."""
    frames = read_frames(src)
    for f in frames[from_frame:]:
        if f.get("text"):
            f["text"] = edit(f["text"])
    write(frames, dst)


def _poisoned(src: Path, dst: Path, count_times: float) -> None:
    """The recording with every ITL _count after its first scrape multiplied (a counter that lies)."""
    line = re.compile(r"^(vllm:inter_token_latency_seconds_count\{[^}]*\}) (\S+)$", re.M)
    _rewritten(
        src, dst, lambda t: line.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * count_times:.6g}", t), 1
    )


def test_history_rows_leave_out_steps_read_through_a_lying_count(tmp_path: Path) -> None:
    bad = tmp_path / "lying.jsonl.gz"
    _poisoned(CLOSED, bad, 1e28)
    honest, lying = history_rows(recording_snaps(CLOSED), 2048), history_rows(recording_snaps(bad), 2048)
    assert len(honest) > 20
    # what is left is the rows that do not read the ITL: step periods of intervals the engine never idled
    assert len(lying) < len(honest) / 3
    assert all(MIN_STEP_S <= y <= MAX_STEP_S for _, y, _ in lying)


def test_whatif_on_a_target_whose_itl_count_lies_says_so_and_does_not_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "lying.jsonl.gz"
    _poisoned(CLOSED, bad, 1e28)
    rc = main(["whatif", str(bad), "--set", "max_num_seqs=16"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "kvdoctor whatif: " in err and "busy intervals" in err and "Traceback" not in err


def _long_answers(src: Path, dst: Path) -> None:
    """The recording with every answer in the output histogram's top bucket, 3,000 tokens on average."""
    bucket = re.compile(r'^(vllm:request_generation_tokens_bucket\{[^}]*le="([^"]+)"[^}]*\}) (\S+)$', re.M)
    total = re.compile(r"^(vllm:request_generation_tokens_sum\{[^}]*\}) (\S+)$", re.M)
    count = re.compile(r"^vllm:request_generation_tokens_count\{[^}]*\} (\S+)$", re.M)

    def edit(text: str) -> str:
        found = count.search(text)
        mean_sum = f"{3000 * float(found.group(1)) if found else 0.0:g}"
        text = bucket.sub(lambda m: m.group(0) if m.group(2) == "+Inf" else f"{m.group(1)} 0", text)
        return total.sub(lambda m: f"{m.group(1)} {mean_sum}", text)

    _rewritten(src, dst, edit)


def test_whatif_on_answers_longer_than_the_model_allows_says_what_it_could_not_simulate(
    shared_032: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a closed loop without think time (kv_bound's 24 clients): before, its refused clients re-sent for ever
    bad = tmp_path / "long_answers.jsonl.gz"
    _long_answers(shared_032 / "kv_bound.jsonl.gz", bad)
    assert main(["whatif", str(bad), "--set", "max_num_seqs=16"]) == 0
    out = capsys.readouterr().out
    assert "the window itself is not reproduced: running 0 predicted against" in out
    assert "100% of the requests simulated now are refused" in out and "max_model_len 1024" in out


def test_a_max_model_len_too_short_for_the_traffic_says_how_much_is_refused(
    shared_032: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = shared_032 / "healthy_closed_c2.jsonl.gz"
    assert main(["whatif", str(rec), "--set", "max_model_len=64"]) == 0
    out = capsys.readouterr().out
    assert "100% of the requests simulated after the change are refused" in out
    assert "requests simulated now are refused" not in out


@pytest.mark.parametrize(
    ("label", "value"),
    [("block_size", "0"), ("block_size", "abc"), ("num_gpu_blocks", "inf"), ("num_gpu_blocks", "-1")],
)
def test_a_cache_size_that_is_no_count_is_named_not_divided_by(
    label: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a fuzzed cache_config_info: block_size="0" raised ZeroDivisionError out of the simulation (a traceback)
    info = re.compile(rf'({label}=")[^"]*(")')
    bad = tmp_path / "info.jsonl.gz"
    _rewritten(CLOSED, bad, lambda t: info.sub(lambda m: m.group(1) + value + m.group(2), t))
    for argv in (
        ["whatif", str(bad), "--set", "max_num_seqs=16"],
        ["plan", str(bad), "--slo", "ttft_p95=2s"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"vllm:cache_config_info {label}='{value}' is no count" in err and "Traceback" not in err
