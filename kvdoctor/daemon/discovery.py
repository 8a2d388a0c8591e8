"""Targets from Prometheus file_sd files (JSON or YAML), re-read when a file changes."""

from __future__ import annotations

import glob
import logging
import os

from kvdoctor.config import TargetSpec
from kvdoctor.config.filesd import read_file_sd
from kvdoctor.config.schema import FileSD, ScrapeDefaults

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
