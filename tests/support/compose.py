"""Recordings composed from real vLLM scrapes, for what one CPU engine cannot show.

Every sample value comes from a real exposition; only labels (`engine`), timestamps and counter offsets (so a second
burst continues the first one's counters instead of looking like a restart) are rewritten.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)$")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")


def frames(path: Path) -> list[tuple[float, str | None]]:
    """(t, text or None for a failed scrape) of a recording, in time order."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        out = [(float(o["t"]), o.get("text")) for o in map(json.loads, filter(str.strip, fh))]
    return sorted(out, key=lambda f: f[0])


def write(path: Path, out: list[tuple[float, str | None]]) -> Path:
    """Write frames as a recording (`{"t", "text"}` or `{"t", "error"}` lines)."""
    lines = [json.dumps({"t": t, "text": x} if x is not None else {"t": t, "error": "down"}) for t, x in out]
    path.write_text("\n".join(lines) + "\n")
    return path


def _families(text: str) -> dict[str, list[str]]:
    """Exposition lines grouped by family, in order: comment lines first, then samples."""
    fams: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            current = parts[2] if len(parts) > 2 else current
            fams.setdefault(current, []).append(line)
        elif line.strip():
            m = _SAMPLE.match(line)
            name = m.group(1) if m else current
            fam = current if name.startswith(current) else name
            fams.setdefault(fam, []).append(line)
    return fams


def data_parallel(texts: list[str]) -> str:
    """One exposition of len(texts) engines: engine k's vLLM samples are texts[k]'s, relabelled engine="k"."""
    base = _families(texts[0])
    per = [_families(t) for t in texts]
    out: list[str] = []
    for fam, lines in base.items():
        out += [x for x in lines if x.startswith("#")]
        if 'engine="0"' not in "".join(lines):
            out += [x for x in lines if not x.startswith("#")]
            continue
        for k, f in enumerate(per):
            out += [
                x.replace('engine="0"', f'engine="{k}"')
                for x in f.get(fam, [])
                if not x.startswith("#") and 'engine="0"' in x
            ]
    return "\n".join(out) + "\n"


def counters(text: str) -> dict[str, float]:
    """Values of the counter and histogram samples of an exposition, by `name{labels}`."""
    kinds = {m.group(1): m.group(2) for m in map(_TYPE.match, text.splitlines()) if m}
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1).endswith("_created"):
            continue
        name = m.group(1)
        fam = next((f for f in (name, re.sub(r"_(total|bucket|sum|count)$", "", name)) if f in kinds), "")
        if kinds.get(fam) in ("counter", "histogram") or kinds.get(name) == "counter":
            out[name + (m.group(2) or "")] = float(m.group(3))
    return out


def continue_counters(text: str, offsets: dict[str, float]) -> str:
    """`text` with `offsets` added to its counter samples: a later stretch of the same server's life."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        key = m.group(1) + (m.group(2) or "") if m else ""
        if m and key in offsets:
            line = f"{key} {float(m.group(3)) + offsets[key]}"
        out.append(line)
    return "\n".join(out) + "\n"
