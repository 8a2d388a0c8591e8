"""`kvdoctor config check`: every error of a config and the files it names, with file:line; one duration grammar."""

from __future__ import annotations

import pytest

from kvdoctor.cli import build_parser, main
from kvdoctor.config import load_config
from kvdoctor.config.durations import format_duration, parse_duration

CLEAN = """\
interval: 1.5s
retention: 1h30m
scrape: {{timeout: 2.5s}}
targets:
  - url: http://gpu-1:8000/metrics
    slo: {{itl_p95: 100ms, ttft_p95: 1.5s}}
    timeout: 500ms
file_sd:
  - files: [{sd}]
    refresh: 0.5m
prometheus: {{url: http://prometheus:9090, timeout: 1m30s}}
web_config: {web}
notify:
  for: 1.5m
  resolve_after: 90s
  repeat_interval: 4h
  update_interval: 2m30s
  for_overrides: {{target_down: 500ms}}
  retry: {{initial: 0.5s, max: 1m}}
  slack: {{webhook_url: https://hooks.example.invalid/x, timeout: 500ms}}
  alertmanager: {{url: http://alertmanager:9093, timeout: 1.5s, ends_at_after: 15m}}
"""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("1h30m", 5400),
        ("1m30s", 90),
        ("2", 2),
        ("0.25", 0.25),
        ("1d12h", 129600),
    ],
)
def test_one_grammar(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1s1m", "-1s", "1.s", "ms", "15x"])
def test_what_is_not_a_duration(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def _clean(tmp_path):
    sd = tmp_path / "sd.yml"
    sd.write_text("- targets: [gpu-2:8000]\n  labels: {kvdoctor_max_num_seqs: '64'}\n")
    web = tmp_path / "web.yml"
    web.write_text("http_server_config: {headers: {X-Frame-Options: deny}}\n")
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(CLEAN.format(sd=sd, web=web))
    return cfg


def test_a_clean_config_with_decimal_and_ms_durations_everywhere_is_ok(tmp_path, capsys):
    cfg = _clean(tmp_path)
    assert main(["config", "check", str(cfg)]) == 0
    assert capsys.readouterr().out.strip() == f"{cfg}: ok"
    loaded = load_config(str(cfg))
    assert (loaded.interval_s, loaded.retention_s, loaded.scrape.timeout_s) == (1.5, 5400.0, 2.5)
    assert loaded.targets[0].slo_itl_p95_s == 0.1 and loaded.targets[0].http.total_timeout == 0.5


def test_every_error_of_config_notify_web_config_rules_and_file_sd_is_printed(tmp_path, capsys):
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n  - name: g\n    rules:\n      - record: x\n        expr: sum(\n")
    sd = tmp_path / "sd.yml"
    sd.write_text("- labels: {a: b}\n")
    web = tmp_path / "web.yml"
    web.write_text("colour: blue\n")
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(
        f"interval: soon\nrules: [{rules}]\nweb_config: {web}\nfile_sd:\n  - files: [{sd}]\n"
        "notify:\n  slack:\n    timeout: later\ntargets:\n  - {url: http://g:8000, model: Llama-9}\n"
    )
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:1: interval: not a duration: 'soon'" in err
    assert f"{cfg}:8: notify.slack.timeout: must be a duration" in err
    assert f"{web}:1: colour: unknown key" in err
    assert f"{rules}:4: rule 'x': expr parse error" in err
    assert f"{sd}:1: group 0: needs a `targets` list" in err
    assert f"{cfg}:10: target g:8000: unknown model 'Llama-9'" in err
    assert err.strip().endswith(f"{cfg}: 6 errors")
    # the config's own errors come first and in line order, the preset one included
    own = [
        line.split(":")[1]
        for line in err.splitlines()
        if line.startswith(f"{cfg}:") and not line.endswith("errors")
    ]
    assert own == ["1", "8", "10"]
    assert err.splitlines()[2].startswith(f"{cfg}:10:")


def test_an_unreadable_config_is_an_error(tmp_path, capsys):
    assert main(["config", "check", str(tmp_path / "missing.yml")]) == 2
    assert "missing.yml: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "http://h:8000", "--interval", "1.5s"],
        ["demo", "--interval", "1.5s", "--duration", "1.5s"],
        ["replay", "r.jsonl.gz", "--interval", "1.5s", "--scrape-interval", "1.5s"],
        ["serve", "--interval", "1.5s"],
        ["replay-server", "r.jsonl.gz", "--from", "1.5s"],
    ],
)
def test_every_duration_flag_takes_the_grammar(argv):
    args = vars(build_parser().parse_args(argv))
    given = {a.lstrip("-").replace("-", "_") for a in argv if a.startswith("--")}
    values = {k: v for k, v in args.items() if k in given or (k == "start" and "from" in given)}
    assert values and all(v == 1.5 for v in values.values()), values


def test_string_duration_flags_take_the_grammar(tmp_path):
    out = tmp_path / "rules"
    assert main(["rules", "export", "--interval", "1.5s", "-o", str(out)]) == 0
    assert "interval: 1s500ms" in (out / "kvdoctor.yml").read_text()


def test_a_misspelt_gpu_preset_is_named_at_its_line(tmp_path, capsys):
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text("targets:\n  - url: http://g:8000\n    model: Qwen3-8B\n    gpu: H10O\n")
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:4: target g:8000: unknown GPU 'H10O'" in err
