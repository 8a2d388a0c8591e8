"""Discovered targets: Prometheus file_sd files (JSON or YAML), re-read when a file changes, and Kubernetes pods."""

from __future__ import annotations

import glob
import logging
import os

from kvdoctor.config import Config, TargetSpec
from kvdoctor.config.filesd import read_file_sd
from kvdoctor.config.schema import FileSD, ScrapeDefaults
from kvdoctor.daemon.kubesd import KubeDiscovery

log = logging.getLogger(__name__)


class FileDiscovery:
    """Keeps the targets of file_sd files, re-reading a file only when its mtime or size changes."""

    def __init__(self, sds: list[FileSD], defaults: ScrapeDefaults | None = None) -> None:
        self.sds = sds
        self.defaults = defaults or ScrapeDefaults()
        self._seen: dict[str, tuple[float, int]] = {}
        self._targets: dict[str, list[TargetSpec]] = {}
        self.errors: list[str] = []

    def targets(self) -> list[TargetSpec]:
        """The current targets of every file (a file that turns bad keeps its last good targets)."""
        self.errors = []
        paths = sorted({p for sd in self.sds for pattern in sd.files for p in glob.glob(pattern)})
        for gone in set(self._targets) - set(paths):
            del self._targets[gone]
            self._seen.pop(gone, None)
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            sig = (st.st_mtime, st.st_size)
            if self._seen.get(path) == sig:
                continue
            targets, errors = read_file_sd(path, self.defaults)
            if errors:
                self.errors += errors
                for e in errors:
                    log.warning("file_sd: %s", e)
                if path in self._targets:
                    continue  # keep the last good version
            self._seen[path] = sig
            self._targets[path] = targets
        return [t for p in sorted(self._targets) for t in self._targets[p]]


class Discovery:
    """Every discovered target: file_sd files and Kubernetes pods (kubernetes_sd)."""

    def __init__(self, cfg: Config, pods: KubeDiscovery | None = None, start: bool = True) -> None:
        self.files = FileDiscovery(cfg.file_sd, cfg.scrape)
        self.pods = pods if pods is not None else KubeDiscovery(cfg.kubernetes_sd)
        if start:
            self.pods.start()

    def targets(self) -> list[TargetSpec]:
        """The targets of both, file_sd's first."""
        return [*self.files.targets(), *self.pods.targets()]

    def renewed(self, cfg: Config) -> Discovery:
        """The discovery for a reloaded config, not yet running: the same pod watchers when kubernetes_sd did not
        change (no re-list), else new ones whose credentials are loaded (ConfigError) but that watch nothing yet."""
        if cfg.kubernetes_sd == self.pods.sds:
            return Discovery(cfg, self.pods, start=False)
        return Discovery(cfg, start=False)

    def taking_over(self, old: Discovery) -> Discovery:
        """This discovery, running, with old's pod watchers stopped if they are not also this one's."""
        if self.pods is not old.pods:
            old.close()
            self.pods.start()
        return self

    def close(self) -> None:
        """Stop watching pods."""
        self.pods.close()
