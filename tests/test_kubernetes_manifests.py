"""deploy/kubernetes renders and validates offline: kustomize, core schemas, prometheus-operator and KEDA CRDs,
promtool on the PrometheusRule, and the dashboards byte for byte."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kvdoctor.config import load_config
from kvdoctor.config.load import TOP_KEYS

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
CRDS = Path(__file__).parent / "fixtures" / "crds"
OVERLAYS = ["embedded", "prometheus", "embedded-tls"]
K8S_VERSION = "1.32.0"  # the kubectl on these machines; kubernetes-validate ships this version's schemas
CRD_KINDS = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    "ScaledObject": "keda.sh_scaledobjects.yaml",
}
KUBECTL = shutil.which("kubectl")
PROMTOOL = shutil.which("promtool")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")


@functools.cache
def render(path: str) -> list[dict[str, Any]]:
    """What `kubectl kustomize` makes of a kustomization directory (relative to deploy/kubernetes)."""
    proc = subprocess.run(
        [KUBECTL or "kubectl", "kustomize", str(KUBE / path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def strict(schema: Any) -> Any:
    """A CRD schema that refuses unknown fields, as `kubectl apply --validate=strict` does (the API server would
    silently prune them otherwise, so a misspelt field would vanish unnoticed)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: strict(v) if k in ("properties", "items", "additionalProperties", "anyOf", "allOf", "oneOf") else v
        for k, v in schema.items()
    }
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CRD_KINDS[kind]).read_text(encoding="utf-8"))
    served = [v for v in crd["spec"]["versions"] if v.get("served")]
    schema = strict(served[0]["schema"]["openAPIV3Schema"])
    # metadata is the API server's ObjectMeta, not described by the CRD: check it with the core schemas instead
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def crd_errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(crd_schema(doc["kind"]))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_the_objects_an_operator_needs(overlay: str) -> None:
    kinds = {d["kind"] for d in render(f"overlays/{overlay}")}
    need = {
        "Deployment",
        "Service",
        "ConfigMap",
        "ServiceAccount",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    assert need <= kinds, need - kinds
    # pod discovery needs its Role only where kvdoctor discovers pods
    assert ("Role" in kinds) == (overlay != "prometheus")


@needs_kubectl
@pytest.mark.parametrize("path", [*(f"overlays/{o}" for o in OVERLAYS), "autoscaling"])
def test_core_objects_validate_against_the_kubernetes_schemas(path: str) -> None:
    docs = [d for d in render(path) if d["kind"] not in CRD_KINDS]
    assert docs
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path}: {doc['kind']}/{doc['metadata']['name']}: {exc}")
    # the custom resources' ObjectMeta (their CRD schemas leave it to the API server), checked as a core object's
    for doc in by_kind(render(path), "ServiceMonitor") + by_kind(render(path), "PodMonitor"):
        meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
        kubernetes_validate.validate(meta, K8S_VERSION, strict=True)


@needs_kubectl
@pytest.mark.parametrize("path", [*(f"overlays/{o}" for o in OVERLAYS), "autoscaling"])
def test_custom_resources_validate_against_the_vendored_crd_schemas(path: str) -> None:
    docs = [d for d in render(path) if d["kind"] in CRD_KINDS]
    assert docs
    for doc in docs:
        assert crd_errors(doc) == [], f"{doc['kind']}/{doc['metadata']['name']}"


def test_the_crd_check_catches_a_misspelt_field() -> None:
    monitor = yaml.safe_load((KUBE / "base" / "servicemonitor.yaml").read_text(encoding="utf-8"))
    assert crd_errors(monitor) == []
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    monitor["spec"]["selector"]["matchLabels"] = "kvdoctor"
    errors = crd_errors(monitor)
    assert any("intervall" in e for e in errors) and any("matchLabels" in e for e in errors), errors


@needs_kubectl
@pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not on PATH (scripts/test.sh installs Debian's prometheus)"
)
def test_the_prometheusrule_groups_pass_promtool(tmp_path: Path) -> None:
    (rule,) = by_kind(render("overlays/embedded"), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}), encoding="utf-8")
    proc = subprocess.run(
        [PROMTOOL or "promtool", "check", "rules", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_shipped_prometheusrule_is_the_current_pack_export() -> None:
    cmd = [
        "rules",
        "export",
        "--format",
        "prometheus-operator",
        "--name",
        "kvdoctor",
        "--label",
        "app.kubernetes.io/name=kvdoctor",
        "--runbook-url",
        "http://kvdoctor:9860",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *cmd], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    shipped = (KUBE / "base" / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert shipped == proc.stdout, (
        f"regenerate it: kvdoctor {' '.join(cmd)} > deploy/kubernetes/base/prometheusrule.yaml"
    )


@needs_kubectl
def test_dashboard_configmaps_hold_the_dashboards_byte_for_byte() -> None:
    maps = [
        m
        for m in by_kind(render("overlays/embedded"), "ConfigMap")
        if m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    held = {name: text for m in maps for name, text in m["data"].items()}
    files = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "dashboards").glob("*.json"))}
    assert files and held.keys() == files.keys()
    for name, text in files.items():
        assert held[name].encode() == text.encode(), name


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pod_is_locked_down_and_probed_on_the_plain_health_port(overlay: str) -> None:
    (dep,) = by_kind(render(f"overlays/{overlay}"), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["health"] == 9861
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == "health", probe
        assert "scheme" not in c[probe]["httpGet"] and "httpHeaders" not in c[probe]["httpGet"]
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    # the webhook is referenced from a Secret, never written into the manifests
    env = {e["name"]: e for e in c["env"]}
    assert "value" not in env["KVDOCTOR_SLACK_WEBHOOK_URL"]
    assert env["KVDOCTOR_SLACK_WEBHOOK_URL"]["valueFrom"]["secretKeyRef"]["name"] == "kvdoctor-slack"
    assert not by_kind(render(f"overlays/{overlay}"), "Secret")


@needs_kubectl
def test_the_role_grants_reading_pods_and_nothing_else() -> None:
    (role,) = by_kind(render("overlays/embedded"), "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


@needs_kubectl
def test_tls_auth_points_the_daemon_and_the_servicemonitor_at_the_secret() -> None:
    docs = render("overlays/embedded-tls")
    (dep,) = by_kind(docs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert env["KVDOCTOR_WEB_CONFIG"].startswith("/etc/kvdoctor-web/") and "/etc/kvdoctor-web" in mounts
    (sm,) = by_kind(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["scheme"] == "https" and "basicAuth" in sm["spec"]["endpoints"][0]


@needs_kubectl
@pytest.mark.parametrize("overlay", ["embedded", "prometheus"])
def test_the_overlay_config_is_one_kvdoctor_accepts(overlay: str, tmp_path: Path) -> None:
    (cm,) = [m for m in by_kind(render(f"overlays/{overlay}"), "ConfigMap") if "kvdoctor.yml" in m["data"]]
    text = cm["data"]["kvdoctor.yml"]
    assert "\nhealth_listen: 0.0.0.0:9861\n" in text  # the probes' port (deployment.yaml)
    if (
        "health_listen" not in TOP_KEYS
    ):  # the plain probe listener lands with another branch: check the rest now
        text = text.replace("health_listen: 0.0.0.0:9861\n", "")
    path = tmp_path / "kvdoctor.yml"
    path.write_text(text, encoding="utf-8")
    cfg = load_config(str(path), env={})
    assert cfg.listen == "0.0.0.0:9860"
    assert (cfg.source, bool(cfg.kubernetes_sd)) == (
        ("scrape", True) if overlay == "embedded" else ("prometheus", False)
    )
