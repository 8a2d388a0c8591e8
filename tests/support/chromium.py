"""Headless Chromium for the page tests: the binary, a run that dumps the DOM, parsers for what it shows."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Cards(HTMLParser):
    """Text, classes and <svg> count of every card (section[data-target]) in a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: dict[str, dict] = {}  # type: ignore[type-arg]
        self._current: dict | None = None  # type: ignore[type-arg]
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-target"):
            self._current = {"text": "", "classes": set(), "svg": 0, "bottleneck": a.get("data-bottleneck")}
            self._current["classes"].update((a.get("class") or "").split())
            self.cards[a["data-target"] or ""] = self._current
            self._depth = 0
        if self._current is None:
            return
        if tag == "section":
            self._depth += 1
        self._current["classes"].update((a.get("class") or "").split())
        self._current["svg"] += tag == "svg"

    def handle_endtag(self, tag: str) -> None:
        if self._current is not None and tag == "section":
            self._depth -= 1
            if self._depth == 0:
                self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["text"] += data + " "


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        CHROMIUM or "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


class Ids(HTMLParser):
    """Every id attribute in a page, and the subresources it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.loads: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "link" and a.get("href"):
            self.loads.append(a["href"] or "")
        if tag in ("script", "img") and a.get("src"):
            self.loads.append(a["src"] or "")
