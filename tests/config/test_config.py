"""Config: every error at once with file and line, environment overrides, file_sd discovery, no secrets shown."""

from __future__ import annotations

import json

import pytest

from kvdoctor.config import ConfigError, load_config
from kvdoctor.daemon.discovery import FileDiscovery

BAD = """\
interval: 15x
listen: nope
targets:
  - http://a:8000
  - url: ftp://b
    max_num_seqs: -1
    slo: {itl_p95: fast}
  - url: http://c:8000
    colour: red
bogus: 1
"""


def test_every_error_is_reported_at_once_with_its_line(tmp_path):
    f = tmp_path / "kvdoctor.yml"
    f.write_text(BAD)
    with pytest.raises(ConfigError) as err:
        load_config(str(f), {})
    got = err.value.errors
    assert f"{f}:1: interval: not a duration: '15x'" in got
    assert f"{f}:2: listen: expected HOST:PORT, got 'nope'" in got
    assert f"{f}:5: url: expected http(s)://host:port/metrics, got 'ftp://b'" in got
    assert f"{f}:6: max_num_seqs: a positive integer" in got
    assert f"{f}:7: slo.itl_p95: not a duration: 'fast'" in got
    assert f"{f}:9: unknown target key 'colour'" in got
    assert f"{f}:10: unknown key 'bogus'" in got


def test_defaults_and_environment_overrides():
    cfg = load_config(None, {"KVDOCTOR_TARGETS": "http://x:8000, http://y:9000/m", "KVDOCTOR_INTERVAL": "5s"})
    assert cfg.interval_s == 5 and cfg.listen == "127.0.0.1:9860"
    assert [(t.name, t.url) for t in cfg.targets] == [
        ("x:8000", "http://x:8000/metrics"),
        ("y:9000", "http://y:9000/m"),
    ]


def test_credentials_never_show(tmp_path):
    secret = "s3cr3t-token-value"
    f = tmp_path / "k.yml"
    tok = tmp_path / "token"
    tok.write_text(secret)
    f.write_text(f"targets:\n  - url: http://user:{secret}@gpu:8000/metrics\n    bearer_token_file: {tok}\n")
    cfg = load_config(str(f), {})
    (t,) = cfg.targets
    assert t.http.bearer_token == secret
    assert secret not in repr(cfg) and secret not in t.safe_url and t.name == "gpu:8000"


def test_file_sd_targets_and_facts(tmp_path):
    sd = tmp_path / "targets.json"
    sd.write_text(
        json.dumps(
            [
                {
                    "targets": ["gpu-1:8000", "gpu-2:8000"],
                    "labels": {"kvdoctor_max_num_seqs": "256", "team": "llm"},
                }
            ]
        )
    )
    f = tmp_path / "k.yml"
    f.write_text(f"file_sd:\n  - files: ['{tmp_path}/*.json']\n")
    disc = FileDiscovery(load_config(str(f), {}).file_sd)
    targets = disc.targets()
    assert [t.name for t in targets] == ["gpu-1:8000", "gpu-2:8000"]
    assert targets[0].max_num_seqs == 256 and targets[0].labels == {"team": "llm"}
    sd.write_text("[{broken")  # a broken edit keeps the last good targets
    import os

    os.utime(sd, (1, 1))
    assert [t.name for t in disc.targets()] == ["gpu-1:8000", "gpu-2:8000"]
    assert disc.errors and str(sd) in disc.errors[0]


@pytest.mark.parametrize("key", ["targets", "file_sd"])
def test_a_list_key_given_a_scalar_is_an_error_at_its_line(tmp_path, key):
    f = tmp_path / "kvdoctor.yml"
    f.write_text(f"interval: 5s\n{key}: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(f), {})
    assert f"{f}:2: {key}: must be a list" in err.value.errors


@pytest.mark.parametrize("listen", ["0.0.0.0:99999", "host:port", "[::1]:"])
def test_a_listen_address_the_server_could_not_bind_is_refused_at_load(tmp_path, listen):
    f = tmp_path / "kvdoctor.yml"
    f.write_text(f'listen: "{listen}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(str(f), {})
    assert err.value.errors == [f"{f}:1: listen: expected HOST:PORT, got {listen!r}"]
