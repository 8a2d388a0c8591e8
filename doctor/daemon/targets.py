"""Per-target bookkeeping of the daemon: the settings a target is scraped with, and its scrape health."""

from __future__ import annotations

import logging
from dataclasses import replace

from doctor.config import TargetSpec
from doctor.daemon.scrape import ScrapeResult
from doctor.daemon.state import TargetStats

log = logging.getLogger("kvdoctor")


def capped(
    specs: dict[str, TargetSpec], interval: float, warned: set[tuple[str, float, float]]
) -> dict[str, TargetSpec]:
    """The specs as scraped: a timeout longer than the interval is cut to it (said once per target and setting)."""
    out = {}
    news: dict[float, list[str]] = {}
    for name, spec in specs.items():
        h = spec.http
        if h.total_timeout > interval:
            key = (name, h.total_timeout, interval)
            if key not in warned:
                warned.add(key)
                news.setdefault(h.total_timeout, []).append(name)
            h = replace(h, total_timeout=interval, read_timeout=min(h.read_timeout, interval),
                        connect_timeout=min(h.connect_timeout, interval))  # fmt: skip
            spec = replace(spec, http=h)
        out[name] = spec
    for timeout, names in news.items():  # one line per setting, not one per target of a large fleet
        who = f"target {names[0]}" if len(names) == 1 else f"{len(names)} targets ({', '.join(names[:3])}, …)"
        log.warning("%s: scrape timeout %gs is longer than the %gs interval; using %gs (set the target's "
                    "`timeout:` or `scrape.timeout` to at most the interval)", who, timeout, interval, interval)  # fmt: skip
    return out


def scrape_stats(
    spec: TargetSpec, prev: TargetStats | None, r: ScrapeResult, error: str | None
) -> TargetStats:
    """The target's stats after scrape r (error: why it counts as failed, None when it is up); logs changes."""
    stats = TargetStats(r.target, spec.safe_url, labels=dict(spec.labels))
    if prev is not None:
        stats.errors_total, stats.last_success_ts = prev.errors_total, prev.last_success_ts
        stats.limit_exceeded_total = dict(prev.limit_exceeded_total)
    stats.last_scrape_duration_s = r.duration_s
    stats.samples = r.samples
    stats.up = error is None
    if r.limit is not None:
        stats.limit_exceeded_total[r.limit] = stats.limit_exceeded_total.get(r.limit, 0) + 1
    if error is None:
        stats.last_success_ts = r.t
    else:
        stats.errors_total += 1
        stats.last_error = error
        # Say it when a target goes down (and when the reason changes), not on every cycle.
        changed = prev is None or prev.up is not False or prev.last_error != error
        log.log(logging.WARNING if changed else logging.DEBUG, "target %s down: %s", r.target, error,
                extra={"target": r.target})  # fmt: skip
    if error is None and prev is not None and prev.up is False:
        log.info("target %s is back up", r.target, extra={"target": r.target})
    return stats
