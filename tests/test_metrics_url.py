"""One URL normaliser: a target typed as host:port, a bare URL or a full one scrapes the same /metrics everywhere."""

from __future__ import annotations

import pytest

from kvdoctor.cli import build_parser
from kvdoctor.cli.check import _spec
from kvdoctor.cli.serve import overrides
from kvdoctor.config import load_config
from kvdoctor.config.targets import metrics_url

CASES = [
    ("gpu-1:8000", "http://gpu-1:8000/metrics"),
    ("http://gpu-1:8000", "http://gpu-1:8000/metrics"),
    ("http://gpu-1:8000/", "http://gpu-1:8000/metrics"),
    ("https://gpu-1/custom/path", "https://gpu-1/custom/path"),
    ("http://gpu-1:8000?match=x", "http://gpu-1:8000/metrics?match=x"),
    (" gpu-1:8000 ", "http://gpu-1:8000/metrics"),
]


@pytest.mark.parametrize(("typed", "url"), CASES)
def test_config_check_and_serve_agree(tmp_path, typed, url):
    assert metrics_url(typed) == url
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"targets: ['{typed}']\n")
    assert load_config(str(cfg), env={}).targets[0].url == url
    assert _spec(build_parser().parse_args(["check", typed])).url == url
    assert overrides(build_parser().parse_args(["serve", "--target", typed])).targets[0] == url
