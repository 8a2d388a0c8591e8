"""A fast parser for the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0, tuned for vLLM's output.

It yields the same samples as prometheus-client's `text_string_to_metric_families` for every family it keeps,
but skips `*_created` series and caches each line's text before its value, which repeats from one scrape of a
target to the next (so a line seen before costs a lookup and a float), and drops the families it is told to.
The two formats differ where it matters here: OpenMetrics timestamps are seconds (text: milliseconds) and a page
ends with `# EOF`; exemplars (`# {trace_id="x"} 1.0` after a sample) are parsed and dropped in both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from kvdoctor.errors import KvdoctorError
from kvdoctor.ingest.lines import ParseError, parse_labels, timestamp_ms, to_float, without_exemplar
from kvdoctor.samples import Labels, Sample, Scrape

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_CACHE_LIMIT = 200_000
# lines not returned: a family keep refuses (counted in Scrape.dropped), a `*_created` series (skipped, as always)
_DROPPED: tuple[str, Labels, bool] = ("dropped", (), False)
_CREATED: tuple[str, Labels, bool] = ("created", (), False)
_new = tuple.__new__  # a Sample without the Python frame of its generated __new__
OPENMETRICS = "application/openmetrics-text"
Row = tuple[str, Labels, float, int | None]  # a Sample's fields as a plain tuple


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


class Parsed(NamedTuple):
    """A parsed page whose samples are plain tuples, for a page that waits (the daemon's, until the cycle).

    The collector untracks a plain tuple of strings and numbers at its first pass; a Sample (a tuple subclass)
    stays tracked, so a fleet's waiting pages would reach the oldest generation and set off full collections.
    """

    rows: list[Row]
    types: dict[str, str]
    dropped: int = 0

    def scrape(self) -> Scrape:
        """The page as Samples."""
        new, sample = _new, Sample
        return Scrape([new(sample, r) for r in self.rows], self.types, self.dropped)


class Keep:
    """The metric names a parse returns: these names, and every name starting with one of the prefixes."""

    def __init__(self, names: frozenset[str], prefixes: tuple[str, ...] = ()) -> None:
        self.names, self.prefixes = names, prefixes

    def __call__(self, name: str) -> bool:
        return name in self.names or name.startswith(self.prefixes)


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


def is_openmetrics(content_type: str) -> bool:
    """Whether an HTTP Content-Type names OpenMetrics (rather than the 0.0.4 text format)."""
    return content_type.split(";", 1)[0].strip().lower() == OPENMETRICS


class Parser:
    """Parses expositions; keeps a cache of label strings and metric names seen before (one parser per target)."""

    def __init__(self) -> None:
        self._labels: dict[str, Labels] = {}
        # metric names seen, each kept once: samples (and what is built from them) share one string per name
        self._names: dict[str, str] = {}
        # A line's text before its value -> (name, labels, kept): a target prints the same series in every
        # scrape, so after the first only the value is new; one lookup replaces the tokenising and the label
        # parsing, and a family nobody reads is skipped for the price of that lookup.
        self._heads: dict[str, tuple[str, Labels, bool]] = {}
        self._limits = NO_LIMITS
        self._keep: Callable[[str], bool] | None = None

    def parse(
        self,
        text: str,
        limits: ScrapeLimits = NO_LIMITS,
        openmetrics: bool | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> Scrape:
        """Parse one exposition; raises ParseError naming the first bad line, LimitExceeded past a limit."""
        return self.read(text, limits, openmetrics, keep).scrape()

    def read(
        self,
        text: str,
        limits: ScrapeLimits = NO_LIMITS,
        openmetrics: bool | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> Parsed:
        """parse(), its samples left as plain tuples; raises as parse() does.

        openmetrics says the format (from the response's Content-Type); None (a recording) guesses it by `# EOF`.
        keep, when given, says which metric names to return: the others' lines are checked once, then only
        counted (`Scrape.dropped`), as a Prometheus `metric_relabel_configs` drop would. Pass the same object
        every scrape: another one (a reload) starts the cache afresh.
        """
        if limits != self._limits or keep is not self._keep:
            # cached label sets passed the old limits, not necessarily these; cached lines the old keep
            self._labels.clear()
            self._heads.clear()
            self._limits, self._keep = limits, keep
        if openmetrics is None:
            openmetrics = text.endswith(("# EOF", "# EOF\n"))
        try:
            return self._parse(text, limits, openmetrics)
        except LimitExceeded:
            self._labels.clear()  # what a refused page cached would only pin memory
            self._heads.clear()
            raise

    def _parse(self, text: str, limits: ScrapeLimits, om: bool) -> Parsed:
        samples: list[Row] = []
        types: dict[str, str] = {}
        append = samples.append
        label_cache = self._labels
        names = self._names
        heads = self._heads
        keep = self._keep
        if len(label_cache) > _CACHE_LIMIT:
            label_cache.clear()
        if len(heads) > _CACHE_LIMIT:
            heads.clear()
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
        counted = dropped = 0
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
            head, _, value = line.rpartition(" ")
            seen = heads.get(head)
            if seen is not None:
                # This exact text before the value parsed before as a name, labels and one value: the line is
                # that series again unless the new value is not a number (then the full parse below says why).
                if max_samples:
                    counted += 1
                    if counted > max_samples:
                        raise LimitExceeded(
                            "sample_limit", f"more than {max_samples} samples, limit {max_samples}"
                        )
                if seen is _CREATED:
                    continue
                if "_" not in value and "#" not in value:
                    try:
                        v = float(value)
                    except ValueError:
                        pass
                    else:
                        if seen is _DROPPED:
                            dropped += 1
                        else:
                            append((seen[0], seen[1], v, None))
                        continue
                if max_samples:
                    counted -= 1  # counted again below
            brace = line.find("{")
            # a line of one value, printed as its head, a space and the value, is cached by its head
            cache = "#" not in line
            try:
                if "#" in line:  # rare: an exemplar, or a `#` in a label value
                    line, brace = without_exemplar(line, brace, lineno)
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
                        cached = parse_labels(inner, lineno, line)
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
                    if cache and len(rest) == 1 and line.endswith(" " + rest[0]):
                        heads[head] = _CREATED
                    continue
                sample: Row
                if len(rest) == 1:
                    sample = (name, labels, to_float(rest[0]), None)
                elif len(rest) == 2:
                    sample = (name, labels, to_float(rest[0]), timestamp_ms(rest[1], om, lineno, line))
                else:
                    raise ParseError(lineno, line, "expected a value and an optional timestamp")
                entry = (name, labels, True)
                if keep is not None and not keep(name):  # checked as any line, then left out
                    dropped += 1
                    entry = _DROPPED
                else:
                    append(sample)
                if cache and len(rest) == 1 and line.endswith(" " + rest[0]):
                    heads[head] = entry
            except ParseError:
                raise
            except (ValueError, IndexError) as exc:
                raise ParseError(lineno, line, f"invalid sample ({exc})") from None
        if om and not eof:
            raise ParseError(lineno, "", "OpenMetrics page without # EOF: truncated?")
        return Parsed(samples, types, dropped)


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
