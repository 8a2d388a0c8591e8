"""The `kubernetes_sd:` section and what a pod (as the API server returns it) makes of it: a target or nothing.

No network here: `daemon/kubesd.py` lists and watches the pods and hands each one to `pod_target`.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.config.schema import ScrapeDefaults, TargetSpec
from kvdoctor.config.targets import TARGET_KEYS, parse_target
from kvdoctor.config.yamlpos import Located
from kvdoctor.jsondoc import JsonObject

SD_KEYS = {"namespaces", "selector", "port", "path", "scheme", "kubeconfig"}
# what an entry may set for every pod it finds (the pod itself gives its URL, name, labels and max_num_seqs)
PASSED_KEYS = TARGET_KEYS - {"url", "name", "max_num_seqs"}
SCRAPE, PORT, PATH, SCHEME = (f"prometheus.io/{k}" for k in ("scrape", "port", "path", "scheme"))
PLACEHOLDER_URL = "http://pod.invalid:1/metrics"


@dataclass(frozen=True)
class KubernetesSD:
    """One `kubernetes_sd:` entry: which pods (namespaces, label selector) and which port of them to scrape."""

    namespaces: tuple[str, ...] = ()  # empty: the namespace kvdoctor runs in
    selector: str = ""  # a Kubernetes label selector, as `kubectl get pods -l` takes
    port: str | int | None = None  # a container port's name or number; None: the prometheus.io/* annotations
    path: str = "/metrics"
    scheme: str = "http"
    kubeconfig: str | None = None  # None: in-cluster when running in a pod, else $KUBECONFIG / ~/.kube/config
    template: TargetSpec = field(default_factory=lambda: TargetSpec(url=PLACEHOLDER_URL))  # shared options
    where: str = field(default="", compare=False)  # file:line, for errors; moving the entry changes nothing


def parse_kubernetes_sd(
    items: Any, doc: Located, errors: list[str], defaults: ScrapeDefaults | None = None
) -> list[KubernetesSD]:
    """The `kubernetes_sd:` list, every problem appended to errors as file:line."""
    if items is None:
        return []
    if not isinstance(items, list):
        errors.append(f"{doc.where('kubernetes_sd')}: kubernetes_sd: a list of entries")
        return []
    out: list[KubernetesSD] = []
    for i, item in enumerate(items):
        path = ("kubernetes_sd", i)
        if not isinstance(item, dict):
            errors.append(f"{doc.where(*path)}: kubernetes_sd entries are mappings")
            continue
        before = len(errors)
        for key in item:
            if key not in SD_KEYS | PASSED_KEYS:
                errors.append(f"{doc.where(*path, key)}: unknown kubernetes_sd key {key!r}")
        ns = item.get("namespaces") or []
        if isinstance(ns, str):
            ns = [ns]
        if not isinstance(ns, list) or not all(isinstance(n, str) and n for n in ns):
            errors.append(f"{doc.where(*path, 'namespaces')}: namespaces: a list of namespace names")
            ns = []
        port = item.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int | str) or port == ""):
            errors.append(f"{doc.where(*path, 'port')}: port: a container port name or number")
        if isinstance(port, str) and port.isdigit():
            port = int(port)
        scheme = item.get("scheme", "http")
        if scheme not in ("http", "https"):
            errors.append(f"{doc.where(*path, 'scheme')}: scheme: `http` or `https`")
        mpath = str(item.get("path", "/metrics"))
        if not mpath.startswith("/"):
            errors.append(f"{doc.where(*path, 'path')}: path: must start with /")
        for key in ("selector", "kubeconfig"):
            if item.get(key) is not None and not isinstance(item[key], str):
                errors.append(f"{doc.where(*path, key)}: {key}: must be a string")
        passed = {k: v for k, v in item.items() if k in PASSED_KEYS}
        template = parse_target({**passed, "url": PLACEHOLDER_URL}, doc, path, errors, defaults)
        if len(errors) > before or template is None:
            continue
        out.append(
            KubernetesSD(
                tuple(ns),
                str(item.get("selector") or ""),
                port,
                mpath,
                str(scheme),
                item.get("kubeconfig"),
                dataclasses.replace(template, origin={}),
                doc.where(*path),
            )
        )
    return out


def pod_ready(pod: JsonObject) -> bool:
    """Running, with an IP, and its Ready condition True (as an Endpoints controller would count it)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or not status.get("podIP"):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def pod_target(pod: JsonObject, sd: KubernetesSD) -> TargetSpec | None:
    """The target a ready pod is (named pod_ip:port), or None when it is not ready or names no port to scrape."""
    if not pod_ready(pod):
        return None
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    scheme, path = sd.scheme, sd.path
    if sd.port is None:  # opt-in by annotation, as Prometheus' usual relabelling of role pod does
        if notes.get(SCRAPE) != "true" or not str(notes.get(PORT, "")).isdigit():
            return None
        port: int | None = int(notes[PORT])
        path = notes.get(PATH) or path
        scheme = str(notes[SCHEME]) if notes.get(SCHEME) in ("http", "https") else scheme
    else:
        port = sd.port if isinstance(sd.port, int) else None
        for c in containers:
            for p in c.get("ports") or []:
                if p.get("name") == sd.port:
                    port = p.get("containerPort")
        if port is None:
            return None
    container = _serving_container(containers, port)
    labels = {
        **sd.template.labels,
        "namespace": str(meta.get("namespace", "")),
        "pod": str(meta.get("name", "")),
    }
    args = _argv(container) if container else []
    if model := vllm_model(args):
        labels["model"] = model
    mns = _flag(args, "--max-num-seqs")
    ip = pod["status"]["podIP"]
    host = f"[{ip}]" if ":" in ip else ip
    return dataclasses.replace(
        sd.template,
        url=f"{scheme}://{host}:{port}{path}",
        name=f"{host}:{port}",
        labels=labels,
        max_num_seqs=int(mns) if mns and mns.isdigit() else sd.template.max_num_seqs,
        origin={"": f"{sd.where} (pod {meta.get('namespace')}/{meta.get('name')})"},
    )


def _serving_container(containers: list[JsonObject], port: int | None) -> JsonObject | None:
    """The container that declares the port, else the one that runs vLLM, else the first."""
    for c in containers:
        if any(p.get("containerPort") == port for p in c.get("ports") or []):
            return c
    for c in containers:
        if "vllm" in " ".join(_argv(c)) or "vllm" in str(c.get("image", "")):
            return c
    return containers[0] if containers else None


def _argv(container: JsonObject) -> list[str]:
    """command + args as words; a `sh -c "vllm serve …"` string is split as the shell would."""
    words: list[str] = []
    for w in [*(container.get("command") or []), *(container.get("args") or [])]:
        w = str(w)
        if " " in w:
            try:
                words += shlex.split(w)
            except ValueError:
                words += w.split()
        else:
            words.append(w)
    return words


def _flag(args: list[str], name: str) -> str | None:
    """The value of --name VALUE or --name=VALUE (vLLM also accepts underscores), last one wins as argparse does."""
    names = {name, name.replace("-", "_").replace("__", "--")}
    value = None
    for i, a in enumerate(args):
        key, eq, v = a.partition("=")
        if key in names:
            if eq:
                value = v
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                value = args[i + 1]
    return value


def vllm_model(args: list[str]) -> str | None:
    """The model name vLLM reports (model_name): --served-model-name, else `vllm serve MODEL`, else --model."""
    if served := _flag(args, "--served-model-name"):
        return served
    for i, a in enumerate(args[:-1]):
        if a == "serve" and i > 0 and "vllm" in args[i - 1] and not args[i + 1].startswith("-"):
            return args[i + 1]
    return _flag(args, "--model")
