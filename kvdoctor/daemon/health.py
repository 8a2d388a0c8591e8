"""Log lines about a target's health: said when it goes down, comes back, or fails for another cause."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kvdoctor.diagnosis.target import Target

log = logging.getLogger("kvdoctor")


class HealthLog:
    """Remembers why each target last failed, so a target that stays down is not warned about every cycle.

    The key is the scrape's cause (`ScrapeResult.cause`), not the message: a message naming a bad line carries
    the line's values, which change from one scrape to the next.
    """

    def __init__(self) -> None:
        self._causes: dict[str, str] = {}

    def note(self, target: Target, was_up: bool | None, cause: str | None) -> None:
        """Log the target's health after a scrape, at WARNING only when it changed."""
        name = target.name
        if target.up is False:
            now = cause or target.last_error
            changed = was_up is not False or self._causes.get(name) != now
            self._causes[name] = now
            level = logging.WARNING if changed else logging.DEBUG
            log.log(level, "target %s down: %s", name, target.last_error, extra={"target": name})
            return
        self._causes.pop(name, None)
        if was_up is False:
            log.info("target %s is back up", name, extra={"target": name})

    def forget(self, names: Iterable[str]) -> None:
        """Drop what is kept about removed targets."""
        for name in names:
            self._causes.pop(name, None)
