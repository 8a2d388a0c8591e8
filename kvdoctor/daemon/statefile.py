"""The state file's shape, checked whole before anything is restored from it: a bad file is a fresh start."""

from __future__ import annotations

from typing import Any

VERSION = 1
_ALERT_TEXT = ("rule", "state")
_ALERT_TIMES = ("value", "active_at", "last_seen")
_ALERT_OPTIONAL_TIMES = ("fired_at", "keep_since")


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _str_map(x: Any) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in x.items())


def _alert(i: int, a: Any) -> str | None:
    where = f"alerts[{i}]"
    if not isinstance(a, dict):
        return f"{where} is {type(a).__name__}, expected an object"
    for k in _ALERT_TEXT:
        if not isinstance(a.get(k), str):
            return f"{where}.{k} is missing or not a string"
    for k in _ALERT_TIMES:
        if k in a and not _num(a[k]):
            return f"{where}.{k} is not a number"
    for k in _ALERT_OPTIONAL_TIMES:
        if a.get(k) is not None and not _num(a[k]):
            return f"{where}.{k} is not a number"
    if not _num(a.get("active_at")) or not _num(a.get("value")):
        return f"{where} lacks value or active_at"
    for k in ("labels", "annotations"):
        if not _str_map(a.get(k)):
            return f"{where}.{k} is not an object of strings"
    return None


def _series(i: int, s: Any) -> str | None:
    where = f"series[{i}]"
    if not isinstance(s, dict):
        return f"{where} is {type(s).__name__}, expected an object"
    labels, points = s.get("labels"), s.get("points")
    if not isinstance(labels, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in labels
    ):
        return f"{where}.labels is not a list of [name, value] strings"
    if not isinstance(points, list) or not all(
        isinstance(p, list) and len(p) == 2 and _num(p[0]) and _num(p[1]) for p in points
    ):
        return f"{where}.points is not a list of [time, value] numbers"
    return None


def _since(c: Any) -> str | None:
    if not isinstance(c, dict):
        return f"classifier is {type(c).__name__}, expected an object"
    since = c.get("since", [])
    ok = isinstance(since, list) and all(
        isinstance(x, list) and len(x) == 4 and all(isinstance(v, str) for v in x[:3]) and _num(x[3])
        for x in since
    )
    return None if ok else "classifier.since is not a list of [target, model, verdict, time]"


def _history(h: Any) -> str | None:
    if not isinstance(h, dict):
        return f"report_history is {type(h).__name__}, expected an object"
    keys = h.get("keys", [])
    if not isinstance(keys, list):
        return "report_history.keys is not a list"
    for i, k in enumerate(keys):
        if (
            not isinstance(k, dict)
            or not isinstance(k.get("hours"), list)
            or not isinstance(k.get("segments"), list)
        ):
            return f"report_history.keys[{i}] lacks its hours or segments"
        for hour in k["hours"]:
            if not isinstance(hour, dict) or not _num(hour.get("start")):
                return f"report_history.keys[{i}] has an hour without a start time"
            bad = [f for f, v in hour.items() if f not in ("seconds", "kv_bins", "util_bins") and not _num(v)]
            if bad:
                return f"report_history.keys[{i}] hour {hour['start']}: {bad[0]} is not a number"
    return None


def problem(doc: Any) -> str | None:
    """What is wrong with a parsed state document, or None if every part has the shape save() writes."""
    if not isinstance(doc, dict):
        return f"the document is {'null' if doc is None else type(doc).__name__}, expected an object"
    if doc.get("version") != VERSION:
        return f"unknown version {doc.get('version')!r}"
    alerts, series = doc.get("alerts", []), doc.get("series", [])
    if not isinstance(alerts, list):
        return f"alerts is {type(alerts).__name__}, expected a list"
    if not isinstance(series, list):
        return f"series is {type(series).__name__}, expected a list"
    found = [_alert(i, a) for i, a in enumerate(alerts)] + [_series(i, s) for i, s in enumerate(series)]
    found += [_since(doc.get("classifier", {}))]
    if "report_history" in doc:
        found.append(_history(doc["report_history"]))
    return next((p for p in found if p), None)
