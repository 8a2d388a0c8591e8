"""`kvdoctor capacity` through argparse: output fields, live sources and exit codes."""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvdoctor.cli import main
from kvdoctor.cli.capacity import add_parser, run
from kvdoctor.sources.exposition import recording_text

FIX = Path(__file__).parents[1] / "fixtures" / "capacity"


def kvdoctor(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="kvdoctor")
    add_parser(parser.add_subparsers(dest="command", required=True))
    code = run(parser.parse_args(["capacity", *argv]))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_documented_fields(capsys):
    code, out, _ = kvdoctor(
        capsys, "--model", "Qwen3-8B", "--kv-cache-bytes", "50000000000", "--max-model-len", "32768", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["kv_bytes_per_token"] == 147_456
    assert doc["weights_bytes"] == 16_380_000_000
    assert doc["kv_cache_bytes"] == 50_000_000_000
    assert doc["kv_cache_tokens"] == 339_084
    assert doc["max_concurrency"] == pytest.approx(10.348, abs=1e-3)
    assert doc["source"] == "model arithmetic" and doc["live"] is None
    assert any("replaces the memory estimate" in a for a in doc["assumptions"])
    assert any("339k to 678k" in a["text"] for a in doc["advice"])


def test_no_gpu_prints_what_the_model_alone_decides(capsys):
    code, out, err = kvdoctor(capsys, "--model", "Qwen3-8B")
    assert code == 0 and err == ""
    rows = dict(line.split("  ", 1) for line in out.splitlines() if "  " in line and not line.startswith(" "))
    assert (
        rows["KV bytes per token"].strip() == "147,456 B (144.0 KiB)"
    )  # 36 layers × 8 KV heads × 128 × 2 × 2 B
    assert rows["weights per GPU"].strip() == "16.4 GB (bf16, 16,380,000,000 B)"
    assert rows["max-model-len"].strip() == "40,960"  # the model's default: max_position_embeddings
    assert rows["one max-len request"].strip() == f"5.6 GiB ({40_960 * 147_456:,} B)"
    assert "KV cache tokens" not in rows and "max-len requests at once" not in rows
    assert "give --gpu NAME, --gpu-memory GiB or --kv-cache-bytes SIZE" in out


def test_no_gpu_json_has_no_cache_figures(capsys):
    code, out, _ = kvdoctor(capsys, "--model", "Qwen3-8B", "--max-model-len", "32768", "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["kv_bytes_per_token"] == 147_456 and doc["weights_bytes"] == 16_380_000_000
    assert doc["max_model_len"] == 32_768 and doc["max_model_len_request_bytes"] == 32_768 * 147_456
    assert doc["kv_cache_bytes"] is doc["kv_cache_tokens"] is doc["max_concurrency"] is doc["fits"] is None
    assert doc["gpu"] is None and doc["advice"] == []


@pytest.mark.parametrize(
    ("size", "cache_bytes"),
    [("50GB", 50 * 10**9), ("50GiB", 50 * 2**30), ("50000000000", 50 * 10**9), ("50 gib", 50 * 2**30)],
)
def test_kv_cache_bytes_takes_units(capsys, size, cache_bytes):
    code, out, _ = kvdoctor(capsys, "--model", "Qwen3-8B", "--kv-cache-bytes", size, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["kv_cache_bytes"] == cache_bytes
    assert doc["kv_cache_tokens"] == cache_bytes // 147_456
    assert doc["max_concurrency"] == pytest.approx(cache_bytes / (40_960 * 147_456), abs=1e-3)


def test_human_table_on_a_gpu_with_tensor_parallel(capsys):
    code, out, _ = kvdoctor(
        capsys,
        "--model",
        "Llama-3.3-70B",
        "--gpu",
        "H100",
        "--tensor-parallel",
        "2",
        "--max-model-len",
        "8192",
    )
    assert code == 0
    assert "Llama-3.3-70B (GQA)" in out and "H100-80GB (79.6 GiB, cc 9.0) × TP 2" in out
    assert "163,840 B (160.0 KiB)" in out  # 327,680 B per token split over 2 GPUs
    assert "to get more KV cache:" in out and "assumptions:" in out


def test_config_file_and_options(capsys):
    code, out, _ = kvdoctor(
        capsys,
        "--config",
        str(FIX / "gemma3-4b-it.json"),
        "--gpu-memory",
        "24",
        "--kv-cache-dtype",
        "fp8",
        "--weights-dtype",
        "int4",
        "--gpu-memory-utilization",
        "0.9",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0
    assert doc["model"] == "gemma3-4b-it" and doc["kv_bytes_per_token"] == 2 * 34 * 4 * 256
    assert doc["weights_dtype"] == "int4" and doc["gpu_memory_utilization"] == 0.9
    assert doc["max_model_len"] == 131_072


def test_model_that_does_not_fit_says_so(capsys):
    code, out, _ = kvdoctor(capsys, "--model", "Llama-3.1-405B", "--gpu", "L4")
    assert code == 0
    assert "does not fit" in out


def test_recording_replay_prints_advice_with_numbers(capsys, shared_032):
    code, out, _ = kvdoctor(capsys, "--recording", str(shared_032 / "kv_bound.jsonl.gz"))
    assert code == 0
    assert "engine (cache_config_info)" in out
    assert "4,096" in out and "700 / 994 tok (255 requests)" in out
    assert "doubles the cache from 4,096 to 8,192 tokens" in out
    assert "[cache_config_info]" in out


def test_recording_json_without_a_model(capsys, shared_032):
    code, out, _ = kvdoctor(capsys, "--recording", str(shared_032 / "kv_bound.jsonl.gz"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["source"] == "cache_config_info"
    assert (doc["kv_cache_tokens"], doc["kv_bytes_per_token"], doc["max_concurrency"]) == (4096, 2048.0, 4.0)
    assert doc["live"]["request_tokens_p99"] == 994.0 and doc["weights_bytes"] is None


def test_recording_with_a_config_uses_the_engines_cache_bytes_and_length(capsys, shared_032, tmp_path):
    # The recordings serve the "tiny" model of tools/vllm-cpu/make_model.py: 4 layers, 2 KV heads of 64.
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 4096,
        "intermediate_size": 1408,
        "max_position_embeddings": 4096,
        "use_sliding_window": False,
        "sliding_window": None,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, _ = kvdoctor(
        capsys,
        "--config",
        str(tmp_path / "config.json"),
        "--recording",
        str(shared_032 / "kv_bound.jsonl.gz"),
        "--json",
    )
    doc = json.loads(out)
    assert code == 0
    assert doc["kv_bytes_per_token"] == doc["live"]["kv_bytes_per_token"] == 2048
    assert doc["kv_cache_tokens"] == doc["live"]["kv_cache_tokens"] == 4096
    assert doc["max_model_len"] == 1024


class _Metrics(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_url_scrapes_metrics_once(capsys, shared_032):
    _Metrics.body = recording_text(shared_032 / "kv_bound.jsonl.gz").encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        code, out, _ = kvdoctor(capsys, "--url", f"127.0.0.1:{server.server_address[1]}", "--json")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0 and json.loads(out)["kv_cache_tokens"] == 4096


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "give --model, --config, --url or --recording"),
        (("--model", "Llama-9", "--gpu", "H100"), "unknown model 'Llama-9'"),
        (("--model", "Qwen3-8B", "--gpu", "V100"), "unknown GPU 'V100'"),
        (("--config", "/nonexistent/config.json", "--gpu", "L4"), "cannot read"),
        (("--recording", "/nonexistent.jsonl.gz"), "cannot read recording"),
    ],
)
def test_input_errors_exit_2_with_a_message(capsys, argv, message):
    code, out, err = kvdoctor(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err


def test_a_url_that_does_not_answer_exits_3_in_one_line(capsys):
    code = main(["capacity", "--url", "127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert code == 3 and out == ""
    assert (
        err
        == "kvdoctor capacity: cannot scrape: http://127.0.0.1:9/metrics: connection failed: connection refused\n"
    )


def test_missing_config_field_is_named(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32}))
    code, _, err = kvdoctor(capsys, "--config", str(path), "--gpu", "L4")
    assert code == 2 and "'num_hidden_layers'" in err and str(path) in err
    path.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}))
    code, _, err = kvdoctor(capsys, "--config", str(path), "--gpu", "L4")
    assert code == 2 and "'vocab_size'" in err  # weights cannot be sized without it
    code, out, _ = kvdoctor(capsys, "--config", str(path), "--kv-cache-bytes", "1e9", "--json")
    assert code == 0 and json.loads(out)["kv_cache_tokens"] == 10**9 // (2 * 32 * 32 * 128 * 2)


@pytest.mark.parametrize(
    "argv",
    [
        ("--model", "Qwen3-8B", "--config", "x.json"),
        ("--model", "Qwen3-8B", "--gpu-memory-utilization", "1.5"),
        ("--model", "Qwen3-8B", "--tensor-parallel", "0"),
        (
            "--model",
            "Qwen3-8B",
            "--tensor-parallel",
            "1.5",
        ),  # not silently 1, as check refuses --max-num-seqs 1.5
        ("--model", "Qwen3-8B", "--kv-cache-dtype", "int8"),
        ("--model", "Qwen3-8B", "--gpu", "L4", "--gpu-memory", "24"),
        ("--model", "Qwen3-8B", "--kv-cache-bytes", "50XB"),
        ("--model", "Qwen3-8B", "--kv-cache-bytes", "0GB"),
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        kvdoctor(capsys, *argv)
    assert exc.value.code == 2
    if "--kv-cache-bytes" in argv:
        assert "argument --kv-cache-bytes: " in capsys.readouterr().err


def test_a_target_with_a_model_and_no_gpu_is_watched_without_an_estimate():
    from kvdoctor.config.schema import TargetSpec
    from kvdoctor.targets import target_facts

    warnings: list[str] = []
    bare = target_facts(TargetSpec(url="http://gpu-1:8000/metrics", model="Qwen3-8B"), warnings.append)
    assert bare.estimate is None and warnings == []  # the engine's cache_config_info sizes it
    sized = target_facts(
        TargetSpec(url="http://gpu-1:8000/metrics", model="Qwen3-8B", gpu="H100"), warnings.append
    )
    assert sized.estimate is not None and sized.estimate.kv_bytes_per_token == 147_456


def test_a_misspelt_preset_is_warned_through_logging_not_printed(caplog, capsys):
    """The daemon's `log: {format: json}` formats every warning: none may go straight to stderr."""
    import logging

    from kvdoctor.config.schema import TargetSpec
    from kvdoctor.targets import target_facts

    with caplog.at_level(logging.WARNING, logger="kvdoctor"):
        facts = target_facts(TargetSpec(url="http://gpu-1:8000/metrics", name="gpu-1", model="Qwen3-8b-typo"))
    assert facts.estimate is None
    assert [r.getMessage() for r in caplog.records if "unknown model 'Qwen3-8b-typo'" in r.getMessage()]
    assert "Qwen3-8b-typo" not in capsys.readouterr().err
