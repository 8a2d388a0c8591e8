"""docker-compose.yml, Dockerfile and deploy/: the compose file validates and everything it mounts exists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kvdoctor.config import load_config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
# Debian's docker-compose package ships the compose-spec JSON schema it validates with.
DEBIAN_SCHEMA = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")
IMAGE_ROOT = "/app/"  # where the Dockerfile copies the source tree
SHARED_SERVICES = {"prometheus", "alertmanager", "grafana"}


def compose() -> dict[str, Any]:
    """The compose file as a dict."""
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def services(profile: str) -> dict[str, Any]:
    """Services a `--profile` starts (services without profiles always start)."""
    return {n: s for n, s in compose()["services"].items() if profile in s.get("profiles", [profile])}


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path in the repo, container path) of every bind mount of a service."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            source, target = v.get("source", ""), v["target"]
        else:
            source, target = v.split(":")[0], v.split(":")[1]
        if source.startswith((".", "/")):
            out.append(((ROOT / source).resolve(), target))
    return out


def test_compose_validates() -> None:
    tool = shutil.which("docker-compose")
    if tool:
        proc = subprocess.run(
            [tool, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        jsonschema = None
    if jsonschema is None or not DEBIAN_SCHEMA.exists():
        pytest.skip("neither docker-compose nor jsonschema + the compose-spec schema are installed")
    schema = json.loads(DEBIAN_SCHEMA.read_text())
    jsonschema.Draft201909Validator(schema).validate(compose())  # its $schema URL has a trailing "#"


def test_every_mount_exists() -> None:
    doc = compose()
    named = set(doc.get("volumes") or {})
    for name, svc in doc["services"].items():
        for v in svc.get("volumes", []):
            source = v["source"] if isinstance(v, dict) else v.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in named, f"{name}: volume {source} not declared"
        for host, _target in bind_mounts(svc):
            assert host.exists(), f"{name}: {host} is mounted but missing"
            assert ROOT in host.parents or host == ROOT, f"{name}: {host} is outside the repo"


def test_profiles() -> None:
    cpu, gpu = set(services("cpu")), set(services("gpu"))
    assert {"vllm-a", "vllm-b", "kvdoctor"} | SHARED_SERVICES <= cpu
    assert {"vllm-gpu", "kvdoctor-gpu"} | SHARED_SERVICES <= gpu
    assert not {"vllm-a", "vllm-b", "kvdoctor"} & gpu and not {"vllm-gpu", "kvdoctor-gpu"} & cpu
    for name, svc in compose()["services"].items():
        assert svc.get("profiles"), f"{name} has no profile: it would start in every profile"


def test_replays_serve_packaged_recordings() -> None:
    for name in ("vllm-a", "vllm-b"):
        cmd = services("cpu")[name]["command"]
        assert cmd[0] == "replay-server" and "--loop" in cmd and "--listen" in cmd
        recordings = [c for c in cmd if c.startswith(IMAGE_ROOT)]
        assert recordings and all(r.startswith(IMAGE_ROOT + "kvdoctor/demo/") for r in recordings), cmd
        if not (ROOT / "kvdoctor" / "demo").is_dir():
            pytest.skip("kvdoctor/demo/ (the packaged demo recordings) does not exist yet")
        for r in recordings:
            assert (ROOT / r.removeprefix(IMAGE_ROOT)).is_file(), f"{name}: {r} is not in kvdoctor/demo/"


def test_gpu_server_flags() -> None:
    svc = services("gpu")["vllm-gpu"]
    assert svc["image"].startswith("vllm/vllm-openai:")
    cmd = [str(c) for c in svc["command"]]
    for flag in ("--model", "--max-model-len", "--max-num-seqs", "--enable-prefix-caching"):
        assert flag in cmd, flag
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.92"
    (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "vllm-a" in svc["networks"]["default"]["aliases"]  # the name kvdoctor and Prometheus scrape


@pytest.mark.parametrize(
    ("service", "config"), [("kvdoctor", "kvdoctor.yml"), ("kvdoctor-gpu", "kvdoctor-gpu.yml")]
)
def test_kvdoctor_config_mounted_and_consistent(service: str, config: str) -> None:
    svc = compose()["services"][service]
    cmd = svc["command"]
    mounts = dict((t, h) for h, t in bind_mounts(svc))
    assert mounts[cmd[cmd.index("--config") + 1]] == ROOT / "deploy" / config
    cfg = yaml.safe_load((ROOT / "deploy" / config).read_text())
    for path in cfg["rules"]:
        mounted = [t for t in mounts if path == t or path.startswith(t.rstrip("/") + "/")]
        assert mounted, f"{path} is not mounted into {service}"
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    vllm = next(j for j in prom["scrape_configs"] if j["job_name"] == "vllm")
    hosts = {t.split(":")[0] for sc in vllm["static_configs"] for t in sc["targets"]}
    for t in cfg["targets"]:
        assert t["name"] in hosts and t["url"].startswith(f"http://{t['name']}:8000/"), t


def test_prometheus_config_checks_through_the_mounts(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not on PATH (scripts/test.sh installs Debian's prometheus)")
    svc = compose()["services"]["prometheus"]
    for host, target in bind_mounts(svc):  # lay the mounts out as the container sees them
        dest = tmp_path / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(host, dest)
    config = next(a.split("=", 1)[1] for a in svc["command"] if a.startswith("--config.file="))
    proc = subprocess.run(
        [promtool, "check", "config", str(tmp_path / config.lstrip("/"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 1 rule files found" in proc.stdout + proc.stderr


def test_alertmanager_config() -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not on PATH (scripts/test.sh installs Debian's prometheus-alertmanager)")
    proc = subprocess.run(
        [amtool, "check-config", str(ROOT / "deploy" / "alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_grafana_provisioning_mounts() -> None:
    svc = compose()["services"]["grafana"]
    mounts = {t: h for h, t in bind_mounts(svc)}
    assert mounts["/etc/grafana/provisioning"] == ROOT / "dashboards" / "provisioning"
    provider = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/kvdoctor.yaml").read_text())[
        "providers"
    ][0]
    path = provider["options"]["path"]
    for board in sorted((ROOT / "dashboards").glob("*.json")):
        assert mounts.get(f"{path}/{board.name}") == board, f"{board.name} is not mounted under {path}"
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home in mounts


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    user = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert user and user[-1] not in ("root", "0")
    assert "EXPOSE 9860" in lines
    assert any(ln.startswith("HEALTHCHECK") for ln in lines) and "/-/healthy" in text
    assert "pip install ." in text
    for ln in lines:
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                if "*" not in src:
                    assert (ROOT / src).exists(), src
    ignored = {ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not {"kvdoctor", "rules", "pyproject.toml"} & ignored
    for name in ("kvdoctor", "kvdoctor-gpu"):
        assert "9860:9860" in compose()["services"][name]["ports"]


def _image_env() -> dict[str, str]:
    """The ENV the Dockerfile sets (KEY=VALUE pairs, continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return dict(
        pair.split("=", 1) for ln in text.splitlines() if ln.startswith("ENV ") for pair in ln.split()[1:]
    )


def test_the_image_listens_everywhere_and_its_healthcheck_asks_the_plain_health_listener(
    tmp_path: Path,
) -> None:
    env = _image_env()
    minimal = tmp_path / "kvdoctor.yml"
    minimal.write_text("targets: [http://vllm:8000/metrics]\nweb_config: /etc/kvdoctor/web.yml\n")
    cfg = load_config(str(minimal), env)
    assert cfg.listen == "0.0.0.0:9860"  # reachable from outside the container, as EXPOSE says
    health = re.search(r"HEALTHCHECK.*'(http://[^']+)'", (ROOT / "Dockerfile").read_text(), re.S)
    assert health is not None
    url = urlsplit(health.group(1))
    # plain http to the health listener: right whatever TLS and basic auth web_config puts on the main port
    assert (url.scheme, url.path, f"{url.hostname}:{url.port}") == ("http", "/-/healthy", cfg.health_listen)
    for service in ("kvdoctor", "kvdoctor-gpu"):  # compose keeps the image's healthcheck
        assert "healthcheck" not in compose()["services"][service]
    own = tmp_path / "own.yml"
    own.write_text("listen: 127.0.0.1:9999\nhealth_listen: 0.0.0.0:9861\n")
    assert (load_config(str(own), env).listen, load_config(str(own), env).health_listen) == (
        "127.0.0.1:9999",
        "0.0.0.0:9861",
    )  # a config's own addresses win over the image's defaults
