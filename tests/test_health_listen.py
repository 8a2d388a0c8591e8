"""The plain health listener: probes keep working when the main port has TLS and basic auth."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import bcrypt
import pytest
import requests

from kvdoctor.cli import build_parser
from kvdoctor.cli.serve import overrides
from kvdoctor.config import ConfigError, load_config
from kvdoctor.config.schema import Config
from kvdoctor.daemon.runner import Daemon
from kvdoctor.rules.loader import default_rule_files, load_files


@pytest.fixture
def tls_and_auth(tmp_path: Path) -> str:
    """A web-config with a self-signed certificate for 127.0.0.1 and one basic-auth user."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "k.pem",
            "-out",
            "c.pem",
            "-days",
            "1",
            "-subj",
            "/CN=kvdoctor",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    users = f"basic_auth_users:\n  alice: {bcrypt.hashpw(b's3cret', bcrypt.gensalt(4)).decode()}\n"
    (tmp_path / "web.yml").write_text(f"tls_server_config: {{cert_file: c.pem, key_file: k.pem}}\n{users}")
    return str(tmp_path / "web.yml")


def test_health_listener_answers_probes_in_plain_http_while_the_main_port_wants_tls_and_auth(
    tls_and_auth: str, tmp_path: Path
) -> None:
    cfg = Config(
        listen="127.0.0.1:0",
        health_listen="127.0.0.1:0",
        web_config=tls_and_auth,
        state_file=str(tmp_path / "state.json"),
    )
    daemon = Daemon(cfg, load_files(default_rule_files()))
    daemon.start()
    try:
        assert daemon.web is not None and daemon.health is not None
        main, health = daemon.web.url, daemon.health.url
        assert main.startswith("https://") and health.startswith("http://")
        ca = str(Path(tls_and_auth).parent / "c.pem")
        assert requests.get(main + "-/healthy", verify=ca, timeout=5).status_code == 401
        assert requests.get(health + "-/healthy", timeout=5).text == "kvdoctor is Healthy.\n"
        # /-/ready means what it means on the main port: 503 until the first evaluation
        main_ready = requests.get(main + "-/ready", verify=ca, auth=("alice", "s3cret"), timeout=5)
        assert requests.get(health + "-/ready", timeout=5).status_code == main_ready.status_code
        for path in ("metrics", "", "api/v1/diagnoses", "static/app.js", "-/reload"):
            assert requests.get(health + path, timeout=5).status_code == 404, path
    finally:
        daemon.shutdown()


def test_health_listen_in_the_config_the_environment_and_on_the_command_line(tmp_path: Path) -> None:
    f = tmp_path / "kvdoctor.yml"
    f.write_text("listen: 0.0.0.0:9860\nhealth_listen: nowhere\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(f), {})
    assert exc.value.errors == [f"{f}:2: health_listen: expected HOST:PORT, got 'nowhere'"]
    assert load_config(None, {"KVDOCTOR_HEALTH_LISTEN": "0.0.0.0:9861"}).health_listen == "0.0.0.0:9861"
    assert load_config(None, {}).health_listen is None
    args = build_parser().parse_args(["serve", "--health-listen", "127.0.0.1:9861"])
    assert overrides(args).health_listen == "127.0.0.1:9861"


def test_exporter_toolkit_flag_spellings_are_aliases(tmp_path: Path) -> None:
    toolkit = build_parser().parse_args(
        [
            "serve",
            "--web.listen-address",
            "0.0.0.0:9860",
            "--web.config.file",
            "web.yml",
            "--log.format",
            "json",
            "--web.external-url",
            "http://k/",
        ]
    )
    ours = build_parser().parse_args(
        [
            "serve",
            "--listen",
            "0.0.0.0:9860",
            "--web-config",
            "web.yml",
            "--log-format",
            "json",
            "--external-url",
            "http://k/",
        ]
    )
    assert overrides(toolkit) == overrides(ours)
    assert overrides(toolkit).listen == "0.0.0.0:9860" and overrides(toolkit).web_config == "web.yml"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--web.listen-address", "nope"])
