"""The targets the daemon watches (configured and discovered) and their scrape schedule."""

from __future__ import annotations

from kvdoctor.config import TargetSpec
from kvdoctor.daemon.scrape import Scraper, capped
from kvdoctor.pipeline import Pipeline
from kvdoctor.status.state import DaemonState
from kvdoctor.targets import target_facts


class WatchedTargets:
    """The target specs in force; keeps the pipeline, the published state and the scrape schedule in step."""

    def __init__(self, scraper: Scraper, pipeline: Pipeline, state: DaemonState) -> None:
        self.scraper, self.pipeline, self.state = scraper, pipeline, state
        self.specs: dict[str, TargetSpec] = {}
        self._plan: tuple[float, dict[str, TargetSpec]] | None = None  # None: not scheduled yet
        self._capped: set[tuple[str, float, float]] = set()  # (target, interval, its floor) already said once

    def schedule(self, interval_s: float) -> None:
        """Scrape every target each interval_s (or at the slowest it allows); nothing when nothing changed."""
        plan = (interval_s, dict(self.specs))
        if plan != self._plan:
            self._plan = plan
            specs = capped(self.specs, interval_s, self._capped)
            self.scraper.schedule(list(specs.values()), interval_s)

    def sync(self, wanted: dict[str, TargetSpec], interval_s: float) -> set[str]:
        """Add, change and drop targets to match wanted; returns the names dropped."""
        removed = set(self.specs) - set(wanted)
        self.pipeline.remove_targets(removed)
        for gone in removed:  # what is kept per target goes with it: a reload to fewer frees it
            self.state.drop_target(gone)
        self._capped = {k for k in self._capped if k[0] not in removed}
        self.scraper.forget(removed)
        for name, spec in wanted.items():
            old = self.specs.get(name)
            if old is None or old != spec:
                self.state.set_target(self.pipeline.add_target(name, target_facts(spec)))
        self.specs = wanted
        if self._plan is not None:  # scheduled: targets, their settings or the interval may have changed
            self.schedule(interval_s)
        return removed
