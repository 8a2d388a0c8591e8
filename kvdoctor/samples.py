"""Value types shared by every stage: a parsed sample, a scrape, a label set."""

from __future__ import annotations

from typing import NamedTuple

# A label set in canonical form: (name, value) pairs sorted by name; `__name__` included where a series is meant.
Labels = tuple[tuple[str, str], ...]


class Sample(NamedTuple):
    """One exposition line: metric name, its labels as printed (without __name__), value, optional timestamp (ms)."""

    name: str
    labels: Labels
    value: float
    timestamp_ms: int | None = None


class Scrape(NamedTuple):
    """The samples of one successful scrape, with the family types declared by `# TYPE` lines."""

    samples: list[Sample]
    types: dict[str, str]
    dropped: int = 0  # samples of families the parser was told not to keep (counted, not returned)


def labels_dict(labels: Labels) -> dict[str, str]:
    """The label set as a plain dict."""
    return dict(labels)


def canonical(name: str, labels: Labels | dict[str, str]) -> Labels:
    """A sorted label set with `__name__` set to name."""
    items = labels.items() if isinstance(labels, dict) else labels
    return tuple(sorted([("__name__", name), *((k, v) for k, v in items if k != "__name__")]))
