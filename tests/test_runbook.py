"""The runbook (/runbook): a section for every finding the classifier can emit, and links that point at it."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvdoctor.cli import main
from kvdoctor.cli.common import build_pipeline
from kvdoctor.config import ConfigError, load_config
from kvdoctor.config.schema import Config
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.web.app import App
from tests.support.chromium import Ids

ROOT = Path(__file__).resolve().parents[1]
DIAGNOSIS = ROOT / "kvdoctor" / "diagnosis"
PROMTOOL = shutil.which("promtool")
# the sections issue 10 names; every other finding must have one too (checked below from the code itself)
NAMED = (
    "kv_cache",
    "batch_cap",
    "compute",
    "preemption_storm",
    "prefix_cache_low_hit_rate",
    "spec_decode",
    "target_down",
)


def ids_of(html: str) -> set[str]:
    p = Ids()
    p.feed(html)
    return p.ids


def get(app: App, path: str) -> tuple[int, str, str]:
    r = app.handle("GET", path, {})
    return r.status, r.content_type, r.body.decode()


def app_with(groups: list | None = None) -> App:
    state = DaemonState()
    return App(state, make_registry(state), rules=(lambda: groups) if groups is not None else None)


def emitted_in_code() -> set[str]:
    """Finding names kvdoctor's own code builds (Finding("name", …) anywhere under kvdoctor/diagnosis)."""
    names = set()
    for path in DIAGNOSIS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding":
                given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "name")]
                names |= {a.value for a in given if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


def pack_alerts() -> list[dict]:
    pack = yaml.safe_load(default_rule_files()[0].read_text())
    return [r for g in pack["groups"] for r in g["rules"] if "alert" in r]


def test_every_finding_the_classifier_can_emit_has_a_section() -> None:
    status, ctype, html = get(app_with(), "/runbook")
    assert status == 200 and ctype.startswith("text/html")
    ids = ids_of(html)
    from_pack = {r["labels"]["finding"] for r in pack_alerts()}
    from_code = emitted_in_code()
    assert {"target_down", "metrics_missing", "max_model_len_oversized"} <= from_code  # the scan finds them
    wanted = set(NAMED) | from_pack | from_code
    assert wanted <= ids, sorted(wanted - ids)


def test_pack_links_are_paths_on_kvdoctor_to_sections_that_exist() -> None:
    ids = ids_of(get(app_with(), "/runbook")[2])
    for rule in pack_alerts():
        url = rule["annotations"]["runbook_url"]
        m = re.fullmatch(r"/runbook#([a-z_]+)", url)
        assert m, (rule["alert"], url)
        assert m.group(1) in ids, (rule["alert"], url)


def test_a_section_says_what_decides_it_and_what_to_change() -> None:
    html = get(app_with(), "/runbook")[2]
    kv = html[html.index('id="kv_cache"') : html.index('id="batch_cap"')]
    assert "VLLMKVCacheBound" in kv and "kvdoctor.yml:" in kv  # which rule, where
    assert (
        "max by (job, instance, model_name) (kvdoctor:engine_kv_bound:max30s)" in kv
    )  # the expression that decides it
    assert "--kv-cache-dtype fp8" in kv  # the pack's advice
    assert (
        "kv_usage_max_30s" in kv and "max_over_time(vllm:kv_cache_usage_perc[30s])" in kv
    )  # evidence → signal
    assert "‹instance›" in kv and "{{" not in html  # templates shown as placeholders, never raw
    spec = html[html.index('id="spec_decode"') : html.index('id="target_down"')]
    assert 'id="spec_decode_low_acceptance"' in spec and 'id="spec_decode_high_load"' in spec
    down = html[html.index('id="target_down"') :]
    assert "VLLMTargetDown" in down and "kvdoctor also raises it from its own scrapes" in down
    assert "<script" not in html  # a static page: nothing to break in a browser without JS


def test_a_finding_added_to_the_pack_gets_its_section(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yml"
    extra.write_text(
        "groups:\n  - name: site\n    rules:\n      - alert: GPUOnFire\n        expr: vector(1)\n"
        "        labels: {severity: critical, finding: gpu_on_fire}\n"
        "        annotations: {summary: 'GPU on fire on {{ $labels.instance }}', advice: 'Call the `fire` team',"
        " runbook_url: /runbook#gpu_on_fire}\n"
    )
    groups = load_files([*default_rule_files(), extra])
    html = get(app_with(groups), "/runbook")[2]
    section = html[html.index('id="gpu_on_fire"') :]
    assert "GPUOnFire" in section and "GPU on fire on ‹instance›" in section
    assert "Call the <code>fire</code> team" in section and "extra.yml:4" in section


def test_runbook_is_cached_by_etag() -> None:
    app = app_with()
    first = app.handle("GET", "/runbook", {})
    etag = first.headers["ETag"]
    assert app.handle("GET", "/runbook", {"If-None-Match": etag}).status == 304
    assert app.handle("POST", "/runbook", {}).status == 405


def test_pipeline_links_point_at_the_configured_page(tmp_path: Path) -> None:
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text("listen: 0.0.0.0:9861\nexternal_url: https://kvdoctor.example/ops/\n")
    pipeline = build_pipeline(load_config(str(cfg)), None, [])
    assert pipeline is not None and pipeline.runbook_url == "https://kvdoctor.example/ops/runbook"
    cfg.write_text("runbook_url: https://wiki.example/llm\n")
    assert load_config(str(cfg)).runbook_page() == "https://wiki.example/llm"
    cfg.write_text("runbook_url: http://kvdoctor:9860\n")  # a bare kvdoctor address: its /runbook
    assert load_config(str(cfg)).runbook_page() == "http://kvdoctor:9860/runbook"
    assert Config(listen="127.0.0.1:9860").runbook_page() == "http://127.0.0.1:9860/runbook"
    assert (
        Config(listen="127.0.0.1:9860").runbook_page("127.0.0.1:4321", tls=True)
        == "https://127.0.0.1:4321/runbook"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("runbook_url: /runbook", "runbook_url: expected an absolute http(s) URL"),
        ("external_url: ftp://x", "external_url: expected an absolute http(s) URL"),
        ("runbook_url: 'http://x/runbook#kv_cache'", "no ?query or #fragment"),
    ],
)
def test_bad_link_bases_are_refused_with_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    cfg = tmp_path / "kvdoctor.yml"
    cfg.write_text(f"interval: 15s\n{line}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(cfg))
    assert f"{cfg}:2: " in str(exc.value) and message in str(exc.value)


def test_export_writes_absolute_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["rules", "export", "--runbook-url", "http://kvdoctor.example:9860", "-o", str(tmp_path)]) == 0
    )
    exported = tmp_path / "kvdoctor.yml"
    text = exported.read_text()
    assert "# kvdoctor rule pack" in text  # still the pack verbatim, comments included
    doc = yaml.safe_load(text)
    urls = [r["annotations"]["runbook_url"] for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("http://kvdoctor.example:9860/runbook#") for u in urls), urls
    if PROMTOOL:
        done = subprocess.run([PROMTOOL, "check", "rules", str(exported)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    capsys.readouterr()
    assert (
        main(["rules", "export", "--format", "prometheus-operator", "--runbook-url", "https://w.example/rb"])
        == 0
    )
    spec = yaml.safe_load(capsys.readouterr().out)["spec"]
    urls = [r["annotations"]["runbook_url"] for g in spec["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://w.example/rb#") for u in urls), urls
    assert main(["rules", "export", "--runbook-url", "kvdoctor:9860"]) == 2
    assert "--runbook-url: expected an absolute http(s) URL" in capsys.readouterr().err
    assert main(["rules", "export"]) == 0  # without a base the links stay kvdoctor paths, and it says so
    assert "add --runbook-url" in capsys.readouterr().err


def test_serve_takes_the_link_bases_as_flags() -> None:
    from kvdoctor.cli import build_parser
    from kvdoctor.cli.serve import overrides

    args = build_parser().parse_args(
        ["serve", "--web.external-url", "https://kv.example/", "--runbook-url", "https://wiki.example/rb"]
    )
    flags = overrides(args)
    assert flags.external_url == "https://kv.example/" and flags.runbook_url == "https://wiki.example/rb"
    with pytest.raises(ConfigError, match="--external-url: expected an absolute http"):
        overrides(build_parser().parse_args(["serve", "--external-url", "kv.example"]))
