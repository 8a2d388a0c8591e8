"""Kubernetes pod discovery (kubernetes_sd) against a local stand-in API server: adds, deletions, readiness
changes, a 410 Gone and a dropped watch; and the daemon diagnoses the pods it found (replay servers as the pods)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvdoctor.cli.config import config_errors
from kvdoctor.config import Config, ConfigError, load_config
from kvdoctor.config.podsd import KubernetesSD, pod_target
from kvdoctor.daemon.kubesd import KubeDiscovery
from kvdoctor.daemon.runner import Daemon
from kvdoctor.replayserver import Playlist, ReplayServer
from kvdoctor.rules.loader import default_rule_files, load_files
from tests.support import wait
from tests.support.clock import ManualClock
from tests.support.kubeapi import KubeAPI, make_pod, self_signed

DEMO = Path(__file__).resolve().parents[2] / "kvdoctor" / "demo"
STACK = {
    "helm-release-name": "vllm",
    "model": "llama3",
}  # what vLLM's production-stack chart puts on its pods


def until(what: Callable[[], object], timeout: float = 10.0) -> object:
    """Poll until what() is truthy (the watch runs on its own thread); fail with its last value."""
    return wait.until(what, timeout=timeout, step=0.02)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    server = KubeAPI()
    yield server
    server.close()


def sd_config(tmp_path: Path, body: str) -> Config:
    path = tmp_path / "kvdoctor.yml"
    path.write_text(body, encoding="utf-8")
    return load_config(str(path), env={})


def discovery(
    api: KubeAPI, tmp_path: Path, entry: str = "selector: helm-release-name,model\n    port: container-port"
) -> KubeDiscovery:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    cfg = sd_config(tmp_path, f"kubernetes_sd:\n  - kubeconfig: {kubeconfig}\n    {entry}\n")
    d = KubeDiscovery(cfg.kubernetes_sd, watch_timeout_s=30)
    d.start()
    return d


def names(d: KubeDiscovery) -> set[str]:
    return {t.name for t in d.targets()}


def test_a_pod_becomes_a_target_named_ip_port_with_namespace_pod_and_model() -> None:
    pod = make_pod(
        "llama-0",
        "10.0.0.7",
        labels=STACK,
        ports={"container-port": 8000, "zmq-port": 55555},
        args=["meta-llama/Llama-3.1-8B", "--port", "8000", "--max-num-seqs", "48"],
    )
    t = pod_target(pod, KubernetesSD(port="container-port"))
    assert t is not None
    assert (t.name, t.url) == ("10.0.0.7:8000", "http://10.0.0.7:8000/metrics")
    assert t.labels == {"namespace": "vllm", "pod": "llama-0", "model": "meta-llama/Llama-3.1-8B"}
    assert t.max_num_seqs == 48  # the pod's own flag, so batch-cap findings know the cap


@pytest.mark.parametrize(
    ("command", "args", "model"),
    [
        (["vllm", "serve"], ["Qwen/Qwen2-7B", "--served-model-name", "qwen"], "qwen"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model=mistral/7b"], "mistral/7b"),
        (["/bin/sh", "-c"], ["exec /opt/venv/bin/vllm serve 'org/m' --port 8000"], "org/m"),
        (["vllm", "serve"], ["--port", "8000"], None),
    ],
)
def test_the_model_comes_from_the_vllm_command_line(
    command: list[str], args: list[str], model: str | None
) -> None:
    pod = make_pod("p", "10.0.0.8", ports={"http": 8000}, args=args)
    pod["spec"]["containers"][0]["command"] = command
    t = pod_target(pod, KubernetesSD(port=8000))
    assert t is not None and t.labels.get("model") == model


def test_annotations_choose_the_port_and_path_when_no_port_is_configured() -> None:
    notes = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/vllm/metrics",
    }
    t = pod_target(make_pod("p", "10.0.0.9", annotations=notes), KubernetesSD())
    assert t is not None and t.url == "http://10.0.0.9:9100/vllm/metrics"
    assert (
        pod_target(make_pod("q", "10.0.0.9", annotations={"prometheus.io/port": "9100"}), KubernetesSD())
        is None
    )


def test_pods_not_ready_or_without_the_named_port_are_not_targets() -> None:
    sd = KubernetesSD(port="container-port")
    assert pod_target(make_pod("p", "10.0.0.1", ready=False, ports={"container-port": 8000}), sd) is None
    assert pod_target(make_pod("p", "10.0.0.1", ports={"http": 8000}), sd) is None
    pending = make_pod("p", "", ports={"container-port": 8000})
    pending["status"]["phase"] = "Pending"
    assert pod_target(pending, sd) is None


def test_bad_kubernetes_sd_entries_are_named_with_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        sd_config(
            tmp_path, "kubernetes_sd:\n  - selector: a=b\n    prot: 8000\n  - port: [1]\n    scheme: ftp\n"
        )
    text = str(err.value)
    assert "kvdoctor.yml:3: unknown kubernetes_sd key 'prot'" in text
    assert "kvdoctor.yml:4: port: a container port name or number" in text
    assert "kvdoctor.yml:5: scheme: `http` or `https`" in text


def test_a_missing_kubeconfig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    cfg = sd_config(tmp_path, f"kubernetes_sd:\n  - kubeconfig: {tmp_path}/nope.yml\n")
    with pytest.raises(
        ConfigError, match=r"kvdoctor.yml:2: kubernetes_sd: cannot load API credentials .*nope.yml"
    ):
        KubeDiscovery(cfg.kubernetes_sd)


def test_config_check_reads_the_kubeconfig_an_entry_names(tmp_path: Path, api: KubeAPI) -> None:
    good = api.kubeconfig(tmp_path / "kubeconfig")
    bad = tmp_path / "broken.yml"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n", encoding="utf-8")
    path = tmp_path / "kvdoctor.yml"
    path.write_text(f"kubernetes_sd:\n  - kubeconfig: {good}\n  - kubeconfig: {bad}\n", encoding="utf-8")
    errors = config_errors(str(path))
    assert len(errors) == 1 and errors[0].startswith(f"{path}:3: kubernetes_sd: kubeconfig {bad}"), errors


def test_in_cluster_it_uses_the_service_account_token_ca_and_namespace(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    api = KubeAPI(token="sa-token", tls=(cert, key))
    sa = tmp_path / "serviceaccount"  # what Kubernetes mounts in the pod
    sa.mkdir()
    (sa / "token").write_text("sa-token", encoding="utf-8")
    (sa / "ca.crt").write_text(cert.read_text(encoding="utf-8"), encoding="utf-8")
    (sa / "namespace").write_text("serving\n", encoding="utf-8")
    api.put(make_pod("a", "10.0.0.1", namespace="serving", labels=STACK, ports={"container-port": 8000}))
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": api.url.rsplit(":", 1)[1]}
    d = KubeDiscovery([KubernetesSD(selector="model", port="container-port")], environ=env, sa_dir=sa)
    d.start()
    try:
        until(
            lambda: names(d) == {"10.0.0.1:8000"}
        )  # over HTTPS checked against ca.crt, in its own namespace
    finally:
        d.close()
        api.close()


def test_watch_follows_adds_readiness_and_deletions(api: KubeAPI, tmp_path: Path) -> None:
    api.put(make_pod("a", "10.0.0.1", labels=STACK, ports={"container-port": 8000}))
    api.put(make_pod("other", "10.0.0.2", labels={"app": "web"}, ports={"container-port": 8000}))
    d = discovery(api, tmp_path)
    try:
        until(lambda: names(d) == {"10.0.0.1:8000"})  # the list; the unselected pod is not a target
        until(lambda: api.watches >= 1)
        api.put(make_pod("b", "10.0.0.3", labels=STACK, ports={"container-port": 8000}, ready=False))
        api.put(make_pod("b", "10.0.0.3", labels=STACK, ports={"container-port": 8000}))  # becomes Ready
        until(lambda: names(d) == {"10.0.0.1:8000", "10.0.0.3:8000"})
        api.put(make_pod("a", "10.0.0.1", labels=STACK, ports={"container-port": 8000}, ready=False))
        until(lambda: names(d) == {"10.0.0.3:8000"})  # stops being Ready: dropped
        api.delete("vllm", "b")
        until(lambda: names(d) == set())
        assert api.lists == 1  # all of it from one list and its watch
    finally:
        d.close()


def test_a_dropped_watch_resumes_from_its_resource_version_without_relisting(
    api: KubeAPI, tmp_path: Path
) -> None:
    d = discovery(api, tmp_path)
    try:
        until(lambda: api.watches >= 1)
        api.drop_watches()
        until(lambda: api.watches >= 2)
        api.put(make_pod("a", "10.0.0.1", labels=STACK, ports={"container-port": 8000}))
        until(lambda: names(d) == {"10.0.0.1:8000"})
        assert api.lists == 1
    finally:
        d.close()


def test_410_gone_relists_and_catches_up_with_what_changed_meanwhile(api: KubeAPI, tmp_path: Path) -> None:
    api.put(make_pod("a", "10.0.0.1", labels=STACK, ports={"container-port": 8000}))
    d = discovery(api, tmp_path)
    try:
        until(lambda: names(d) == {"10.0.0.1:8000"} and api.watches >= 1)
        # while the watch is cut, pods change and the history is compacted: resuming gets 410 Gone
        api.drop_watches()
        api.delete("vllm", "a")
        api.put(make_pod("c", "10.0.0.4", labels=STACK, ports={"container-port": 8000}))
        api.compact()
        until(lambda: names(d) == {"10.0.0.4:8000"})
        assert api.lists == 2
    finally:
        d.close()


def test_the_daemon_diagnoses_the_pods_it_discovers(api: KubeAPI, tmp_path: Path) -> None:
    clock = ManualClock()  # replay servers and daemon share one clock: a cycle a second, no sleeping
    servers = {
        rec: ReplayServer(
            Playlist([DEMO / f"{rec}.jsonl.gz"], start_offset_s=off, loop=True), clock=clock
        ).start()
        for rec, off in (("kv_bound", 40.0), ("healthy", 85.0))
    }
    ports = {rec: int(s.url.rsplit(":", 1)[1].split("/")[0]) for rec, s in servers.items()}
    for rec, port in ports.items():  # each "pod" is a replay server on loopback
        api.put(
            make_pod(
                f"vllm-{rec}",
                "127.0.0.1",
                labels=STACK,
                ports={"container-port": port},
                args=["org/model", "--port", str(port)],
            )
        )
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    cfg = sd_config(
        tmp_path,
        f"interval: 1s\nkubernetes_sd:\n  - kubeconfig: {kubeconfig}\n    selector: model\n    port: container-port\n",
    )
    d = Daemon(cfg, load_files(default_rule_files()), clock=clock)
    try:
        until(lambda: len(d.discovery.targets()) == 2)
        seen: dict[str, set[str]] = {}
        for _ in range(25):  # a verdict needs a 15 s window
            for x in d.cycle():
                seen.setdefault(x.target, set()).add(x.bottleneck)
            clock.advance(1.0)
        assert "kv_cache" in seen[f"127.0.0.1:{ports['kv_bound']}"], seen
        assert "healthy" in seen[f"127.0.0.1:{ports['healthy']}"], seen
        target = d.pipeline.targets[f"127.0.0.1:{ports['kv_bound']}"]
        assert target.labels == {"namespace": "vllm", "pod": "vllm-kv_bound", "model": "org/model"}
    finally:
        d.shutdown()
        for s in servers.values():
            s.stop()


def test_a_reload_keeps_the_watch_when_kubernetes_sd_is_unchanged_and_replaces_it_when_not(
    api: KubeAPI, tmp_path: Path
) -> None:
    api.put(make_pod("a", "10.0.0.1", labels=STACK, ports={"container-port": 8000, "metrics": 9000}))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "kvdoctor.yml"
    entry = f"kubernetes_sd:\n  - kubeconfig: {kubeconfig}\n    selector: model\n    port: "
    path.write_text(entry + "container-port\n", encoding="utf-8")
    d = Daemon(load_config(str(path), env={}), load_files(default_rule_files()), str(path))
    try:
        until(lambda: {t.name for t in d.discovery.targets()} == {"10.0.0.1:8000"})
        pods = d.discovery.pods
        path.write_text("interval: 5s\n" + entry + "container-port\n", encoding="utf-8")
        assert d.reload()[0]
        assert d.discovery.pods is pods  # same entries (on other lines): the running watch goes on
        path.write_text(entry + "metrics\n", encoding="utf-8")
        ok, message = d.reload()
        assert ok and "kubernetes_sd changed" in message
        until(lambda: {t.name for t in d.discovery.targets()} == {"10.0.0.1:9000"})
        assert api.lists == 2
        # credentials that cannot load: refused whole, the running watch stays
        path.write_text(f"kubernetes_sd:\n  - kubeconfig: {tmp_path}/gone.yml\n", encoding="utf-8")
        ok, message = d.reload()
        assert not ok and "gone.yml" in message
        assert {t.name for t in d.discovery.targets()} == {"10.0.0.1:9000"}
    finally:
        d.shutdown()
