"""A fast parser for the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0, tuned for vLLM's output.

It yields the same samples as prometheus-client's `text_string_to_metric_families` for every family it keeps,
but skips `*_created` series and caches label strings, which repeat from one scrape of a target to the next.
The two formats differ where it matters here: OpenMetrics timestamps are seconds (text: milliseconds) and a page
ends with `# EOF`; exemplars (`# {trace_id="x"} 1.0` after a sample) are parsed and dropped in both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kvdoctor.errors import InputError, KvdoctorError
from kvdoctor.samples import Labels, Sample, Scrape

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
# The label set of a line that holds a `#` (an exemplar, or one in a label value): quoted values skipped whole.
_LABELSET_RE = re.compile(r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}', re.S)
_EXEMPLAR_RE = re.compile(r'\s*\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}\s*(\S+)(?:\s+(\S+))?\s*\Z', re.S)
OPENMETRICS = "application/openmetrics-text"


class ParseError(InputError):
    """An exposition line that is not valid text format; names the line."""

    def __init__(self, lineno: int, line: str, reason: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {lineno}: {reason}: {shown!r}")
        self.lineno = lineno
        # What went wrong without the line's values or position, which change from scrape to scrape:
        # a warning is said again when this changes, not when a counter in the bad line moves.
        name = re.match(r"\s*([^\s{]*)", line)
        self.cause = f"{reason.split(' (', 1)[0]} in {name.group(1) if name else ''}".rstrip()


@dataclass(frozen=True)
class ScrapeLimits:
    """Prometheus' per-scrape limits; 0 means no limit. Defaults fit any real vLLM server many times over."""

    sample_limit: int = 50_000  # a DP8 vLLM server exposes about 3,000 samples
    label_limit: int = 128  # vllm:cache_config_info carries 38 labels (__name__ included) in 0.32
    label_value_length_limit: int = 4096


NO_LIMITS = ScrapeLimits(0, 0, 0)


class LimitExceeded(KvdoctorError):
    """A scrape over one of its limits: refused whole. `limit` names the setting."""

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(f"{limit} exceeded: {detail}")
        self.limit = limit


def _lines(text: str) -> Iterator[str]:
    # Line by line without a list of every line: a page with a million lines is refused before it becomes one.
    start = 0
    find = text.find
    while True:
        end = find("\n", start)
        if end == -1:
            yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], value)


def _float(text: str) -> float:
    # Go's ParseFloat accepts these spellings; Python's float() also takes "infinity" and underscores, which we refuse.
    if "_" in text:
        raise ValueError(text)
    return float(text)


def _timestamp_ms(text: str, seconds: bool, lineno: int, line: str) -> int:
    ts = _float(text)
    if not math.isfinite(ts):
        raise ParseError(lineno, line, f"timestamp {text} is not a finite number")
    return round(ts * 1000) if seconds else int(ts)


def _without_exemplar(line: str, brace: int, lineno: int) -> tuple[str, int]:
    """A line holding a `#` without its exemplar (checked, then dropped), and where its label set opens (or -1)."""
    if brace > line.find("#"):
        brace = -1  # the `{` is the exemplar's: a label set's comes before any `#`
    close = -1
    if brace != -1:
        m = _LABELSET_RE.match(line, brace)
        if m is None:
            raise ParseError(lineno, line, "unclosed label set")
        close = m.end() - 1
    head, hashed, exemplar = line[close + 1 :].partition("#")
    if hashed:
        m = _EXEMPLAR_RE.match(exemplar)
        if m is None or not _LABELS_OK_RE.match(m.group(1)):
            raise ParseError(lineno, line, "invalid exemplar")
        try:
            _float(m.group(2))
            if m.group(3) is not None:
                _timestamp_ms(m.group(3), True, lineno, line)
        except ValueError:
            raise ParseError(lineno, line, "invalid exemplar value or timestamp") from None
    # What is left has no `}` after the label set, so the caller's rfind finds the set's own.
    return line[: close + 1] + head, brace


def is_openmetrics(content_type: str) -> bool:
    """Whether an HTTP Content-Type names OpenMetrics (rather than the 0.0.4 text format)."""
    return content_type.split(";", 1)[0].strip().lower() == OPENMETRICS


class Parser:
    """Parses expositions; keeps a cache of label strings and metric names seen before (one parser per target)."""

    def __init__(self) -> None:
        self._labels: dict[str, Labels] = {}
        # metric names seen, each kept once: samples (and what is built from them) share one string per name
        self._names: dict[str, str] = {}
        self._limits = NO_LIMITS

    def parse(self, text: str, limits: ScrapeLimits = NO_LIMITS, openmetrics: bool | None = None) -> Scrape:
        """Parse one exposition; raises ParseError naming the first bad line, LimitExceeded past a limit.

        openmetrics says the format (from the response's Content-Type); None (a recording) guesses it by `# EOF`.
        """
        if limits != self._limits:  # cached label sets passed the old limits, not necessarily these
            self._labels.clear()
            self._limits = limits
        if openmetrics is None:
            openmetrics = text.endswith(("# EOF", "# EOF\n"))
        try:
            return self._parse(text, limits, openmetrics)
        except LimitExceeded:
            self._labels.clear()  # what a refused page cached would only pin memory
            raise

    def _parse(self, text: str, limits: ScrapeLimits, om: bool) -> Scrape:
        samples: list[Sample] = []
        types: dict[str, str] = {}
        append = samples.append
        label_cache = self._labels
        names = self._names
        if len(label_cache) > _CACHE_LIMIT:
            label_cache.clear()
        # Lines that are not comments bound the samples from above, and from below once blank lines are taken
        # out (at most two per "\n\n"): a page surely over the limit is refused unread, a page that may be is
        # read line by line and counted, any other is parsed at full speed.
        max_samples = limits.sample_limit
        if max_samples:
            lines_not_comments = text.count("\n") + 1 - text.count("\n#") - text.startswith("#")
            at_least = lines_not_comments - 2 * text.count("\n\n") - 1
            if at_least > max_samples:
                raise LimitExceeded("sample_limit", f"at least {at_least} samples, limit {max_samples}")
            if lines_not_comments <= max_samples:
                max_samples = 0
        lines: Iterable[str] = _lines(text) if max_samples else text.split("\n")
        counted = 0
        eof = lineno = 0
        for lineno, line in enumerate(lines, 1):
            if not line:
                continue
            if eof:
                raise ParseError(lineno, line, f"content after # EOF (line {eof})")
            if line[0] == "#":
                if line.startswith("# TYPE "):
                    parts = line.split(None, 3)
                    if len(parts) == 4:
                        types[parts[2]] = parts[3].strip()
                elif om and line == "# EOF":
                    eof = lineno
                continue
            brace = line.find("{")
            try:
                if "#" in line:  # rare: an exemplar, or a `#` in a label value
                    line, brace = _without_exemplar(line, brace, lineno)
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
                        if limits is not NO_LIMITS:
                            _check_labels(name, cached, limits)
                        label_cache[inner] = cached
                    labels = cached
                    rest = line[close + 1 :].split()
                known = names.get(name)
                if known is None:
                    if not _NAME_RE.match(name):
                        if line.lstrip().startswith("#") or not line.strip():
                            continue
                        raise ParseError(lineno, line, "invalid metric name")
                    if len(names) < _CACHE_LIMIT:
                        names[name] = name
                else:
                    name = known
                if max_samples:
                    counted += 1
                    if counted > max_samples:
                        raise LimitExceeded(
                            "sample_limit", f"more than {max_samples} samples, limit {max_samples}"
                        )
                if name.endswith("_created"):
                    continue
                if len(rest) == 1:
                    append(Sample(name, labels, _float(rest[0])))
                elif len(rest) == 2:
                    append(Sample(name, labels, _float(rest[0]), _timestamp_ms(rest[1], om, lineno, line)))
                else:
                    raise ParseError(lineno, line, "expected a value and an optional timestamp")
            except ParseError:
                raise
            except (ValueError, IndexError) as exc:
                raise ParseError(lineno, line, f"invalid sample ({exc})") from None
        if om and not eof:
            raise ParseError(lineno, "", "OpenMetrics page without # EOF: truncated?")
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


def _check_labels(name: str, labels: Labels, limits: ScrapeLimits) -> None:
    if limits.label_limit and len(labels) + 1 > limits.label_limit:
        raise LimitExceeded(
            "label_limit",
            f"{name} has {len(labels) + 1} labels (__name__ included), limit {limits.label_limit}",
        )
    if limits.label_value_length_limit:
        for k, v in labels:
            if len(v) > limits.label_value_length_limit:
                raise LimitExceeded(
                    "label_value_length_limit",
                    f"{name} label {k} is {len(v)} characters long, limit {limits.label_value_length_limit}",
                )


def parse(text: str, openmetrics: bool | None = None) -> Scrape:
    """Parse one exposition with a fresh parser (no cache carried between calls)."""
    return Parser().parse(text, openmetrics=openmetrics)
