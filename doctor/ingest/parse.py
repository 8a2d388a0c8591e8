"""A fast parser for the Prometheus text exposition format (0.0.4), tuned for vLLM's output.

It yields the same samples as prometheus-client's `text_string_to_metric_families` for every family it keeps,
but skips `*_created` series and caches label strings, which repeat from one scrape of a target to the next.
"""

from __future__ import annotations

import re

from doctor.errors import InputError
from doctor.samples import Labels, Sample, Scrape

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABELS_OK_RE = re.compile(
    r'(?:\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*,)*\s*'
    r'(?:[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*)?\Z',
    re.S,
)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"', re.S)
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r"\\[\\\"n]")
_CACHE_LIMIT = 200_000


class ParseError(InputError):
    """An exposition line that is not valid text format; names the line."""

    def __init__(self, lineno: int, line: str, reason: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {lineno}: {reason}: {shown!r}")
        self.lineno = lineno


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], value)


def _float(text: str) -> float:
    # Go's ParseFloat accepts these spellings; Python's float() also takes "infinity" and underscores, which we refuse.
    if "_" in text:
        raise ValueError(text)
    return float(text)


class Parser:
    """Parses expositions; keeps a cache of label strings and metric names seen before (one parser per target)."""

    def __init__(self) -> None:
        self._labels: dict[str, Labels] = {}
        self._names: set[str] = set()

    def parse(self, text: str) -> Scrape:
        """Parse one exposition; raises ParseError naming the first bad line."""
        samples: list[Sample] = []
        types: dict[str, str] = {}
        append = samples.append
        label_cache = self._labels
        names = self._names
        if len(label_cache) > _CACHE_LIMIT:
            label_cache.clear()
        for lineno, line in enumerate(text.split("\n"), 1):
            if not line:
                continue
            if line[0] == "#":
                if line.startswith("# TYPE "):
                    parts = line.split(None, 3)
                    if len(parts) == 4:
                        types[parts[2]] = parts[3].strip()
                continue
            brace = line.find("{")
            try:
                if brace == -1:
                    parts = line.split()
                    name = parts[0]
                    labels: Labels = ()
                    rest = parts[1:]
                else:
                    name = line[:brace].rstrip()
                    close = line.rfind("}")
                    if close < brace:
                        raise ParseError(lineno, line, "unclosed label set")
                    inner = line[brace + 1 : close]
                    cached = label_cache.get(inner)
                    if cached is None:
                        cached = self._parse_labels(inner, lineno, line)
                        label_cache[inner] = cached
                    labels = cached
                    rest = line[close + 1 :].split()
                if name not in names:
                    if not _NAME_RE.match(name):
                        if line.lstrip().startswith("#") or not line.strip():
                            continue
                        raise ParseError(lineno, line, "invalid metric name")
                    names.add(name)
                if name.endswith("_created"):
                    continue
                if len(rest) == 1:
                    append(Sample(name, labels, _float(rest[0])))
                elif len(rest) == 2:
                    append(Sample(name, labels, _float(rest[0]), int(_float(rest[1]))))
                else:
                    raise ParseError(lineno, line, "expected a value and an optional timestamp")
            except ParseError:
                raise
            except (ValueError, IndexError) as exc:
                raise ParseError(lineno, line, f"invalid sample ({exc})") from None
        return Scrape(samples, types)

    @staticmethod
    def _parse_labels(inner: str, lineno: int, line: str) -> Labels:
        if not _LABELS_OK_RE.match(inner):
            raise ParseError(lineno, line, "invalid label set")
        pairs = _LABEL_RE.findall(inner)
        if "\\" in inner:
            pairs = [(k, _unescape(v)) for k, v in pairs]
        if len({k for k, _ in pairs}) != len(pairs):
            raise ParseError(lineno, line, "duplicate label name")
        return tuple(pairs)


def parse(text: str) -> Scrape:
    """Parse one exposition with a fresh parser (no cache carried between calls)."""
    return Parser().parse(text)
