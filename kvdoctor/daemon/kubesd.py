"""Targets from Kubernetes pods, as Prometheus' kubernetes_sd_configs role `pod` finds them: list, then watch from the
list's resourceVersion, re-list on 410 Gone; a pod that is deleted or stops being Ready is dropped."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.config import ConfigError, TargetSpec
from kvdoctor.config.podsd import KubernetesSD, pod_target

if TYPE_CHECKING:
    from kubernetes import client, watch

# The kubernetes client takes ~0.5 s (seconds on a busy machine) to import, and every CLI command imports this
# module through `serve` and `config check`: it is imported where it is used, so only kubernetes_sd users pay.

log = logging.getLogger(__name__)
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")  # where Kubernetes mounts the pod's token
GONE = 410


def api_client(
    kubeconfig: str | None, environ: Mapping[str, str] | None = None, sa_dir: Path = SA_DIR
) -> tuple[client.ApiClient, str]:
    """An API client and its default namespace: in-cluster (the pod's service account in sa_dir) when running in a
    pod and no kubeconfig is named, else the kubeconfig ($KUBECONFIG, ~/.kube/config) and its context's namespace."""
    from kubernetes import client, config
    from kubernetes.config.incluster_config import InClusterConfigLoader

    environ = os.environ if environ is None else environ
    if kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST"):
        conf = client.Configuration()
        loader = InClusterConfigLoader(str(sa_dir / "token"), str(sa_dir / "ca.crt"), environ=environ)
        loader.load_and_set(conf)  # re-reads the token file each minute: projected tokens rotate
        return client.ApiClient(conf), (sa_dir / "namespace").read_text(encoding="utf-8").strip()
    api = config.new_client_from_config(config_file=kubeconfig)
    _, current = config.list_kube_config_contexts(kubeconfig)
    return api, (current or {}).get("context", {}).get("namespace") or "default"


def kubeconfig_problem(sd: KubernetesSD) -> str | None:
    """Why the kubeconfig an entry names cannot be used (read offline, no request made); None when it can."""
    if sd.kubeconfig is None:
        return None
    from kubernetes import client, config

    try:
        config.load_kube_config(config_file=sd.kubeconfig, client_configuration=client.Configuration())
    except Exception as exc:  # the client raises several kinds for a missing or malformed file
        return f"{sd.where}: kubernetes_sd: kubeconfig {sd.kubeconfig}: {exc}"
    return None


class PodWatcher:
    """Keeps the pods of one namespace that one kubernetes_sd entry selects, on a thread of its own."""

    def __init__(
        self,
        api: client.ApiClient,
        sd: KubernetesSD,
        namespace: str,
        watch_timeout_s: int = 300,
        max_backoff_s: float = 30.0,
    ) -> None:
        from kubernetes import client

        self.core, self.sd, self.namespace = client.CoreV1Api(api), sd, namespace
        self.watch_timeout_s, self.max_backoff_s = watch_timeout_s, max_backoff_s
        self._pods: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self.lists = 0  # how often it (re-)listed: once at start, again after each 410 or failure
        self._thread = threading.Thread(target=self._run, name=f"kubesd-{namespace}", daemon=True)

    def start(self) -> None:
        """Start listing and watching (once)."""
        if self._thread.ident is None:
            self._thread.start()

    def close(self) -> None:
        """Stop watching (the open watch request is closed, so the thread ends promptly)."""
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()
            # the streaming response the watch reads: closing it unblocks the read
            resp = getattr(w, "_resp", None)
            if resp is not None:
                with contextlib.suppress(Exception):  # already closed or mid-read: the thread ends either way
                    resp.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def targets(self) -> list[TargetSpec]:
        """One target per ready pod with a port to scrape."""
        with self._lock:
            pods = list(self._pods.values())
        return [t for t in (pod_target(p, self.sd) for p in pods) if t is not None]

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                rv = self._list()
            except Exception as exc:  # unreachable, or credentials refused: retry, slower each time
                self._failed("list", exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            backoff = 1.0
            while not self._stop.is_set():
                try:
                    rv = self._follow(rv)
                    backoff = 1.0
                    continue
                except Exception as exc:  # the client's ApiException (.status), or a dropped connection
                    if getattr(exc, "status", None) == GONE:  # rv was compacted away: start from a fresh list
                        log.info("kubernetes_sd %s: watch expired (410 Gone), re-listing", self.namespace)
                        break
                    self._failed("watch", exc)  # then resume from the last resourceVersion seen
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    def _failed(self, what: str, exc: Exception) -> None:
        if self._stop.is_set():
            return  # close() cut the request
        if hasattr(exc, "status") and hasattr(exc, "reason"):  # the client's ApiException
            log.warning("kubernetes_sd %s: %s: API error %s %s", self.namespace, what, exc.status, exc.reason)
        else:
            log.warning("kubernetes_sd %s: %s: %s: %s", self.namespace, what, type(exc).__name__, exc)

    def _list(self) -> str:
        resp = self.core.list_namespaced_pod(
            self.namespace, label_selector=self.sd.selector, _preload_content=False, _request_timeout=30
        )
        body = json.loads(resp.data)  # type: ignore[attr-defined]  # _preload_content=False: the raw response
        with self._lock:
            self._pods = {_key(p): p for p in body.get("items") or []}
        self.lists += 1
        return str(body["metadata"]["resourceVersion"])

    def _follow(self, rv: str) -> str:
        """Apply watch events from rv until the server ends the watch; the resourceVersion to go on from."""
        from kubernetes import watch

        self._watch = w = watch.Watch()
        stream = w.stream(
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=self.sd.selector,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=(10, self.watch_timeout_s + 30),
        )
        for event in stream:
            if self._stop.is_set():
                break
            pod = event.get("raw_object") or {}  # the JSON as sent; ERROR events raise ApiException instead
            rv = str((pod.get("metadata") or {}).get("resourceVersion") or rv)
            kind = event.get("type")
            with self._lock:
                if kind in ("ADDED", "MODIFIED"):
                    self._pods[_key(pod)] = pod
                elif kind == "DELETED":
                    self._pods.pop(_key(pod), None)
        return rv


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


class KubeDiscovery:
    """Every kubernetes_sd entry's watchers (one per namespace); credentials are loaded at once, start() watches."""

    def __init__(
        self,
        sds: list[KubernetesSD],
        watch_timeout_s: int = 300,
        environ: Mapping[str, str] | None = None,
        sa_dir: Path = SA_DIR,
    ) -> None:
        self.sds = sds
        self.watchers: list[PodWatcher] = []
        for sd in sds:
            try:
                api, own = api_client(sd.kubeconfig, environ, sa_dir)
            except Exception as exc:  # the client raises several kinds for a bad kubeconfig
                self.close()
                where = sd.kubeconfig or "in-cluster service account / $KUBECONFIG / ~/.kube/config"
                raise ConfigError(
                    [f"{sd.where}: kubernetes_sd: cannot load API credentials ({where}): {exc}"]
                ) from exc
            for ns in sd.namespaces or (own,):
                self.watchers.append(PodWatcher(api, sd, ns, watch_timeout_s))

    def start(self) -> None:
        """Start every watcher."""
        for w in self.watchers:
            w.start()

    def targets(self) -> list[TargetSpec]:
        """The targets of every watcher."""
        return [t for w in self.watchers for t in w.targets()]

    def close(self) -> None:
        """Stop every watcher."""
        for w in self.watchers:
            w.close()
