"""The OpenMetrics project's own parser suite (tests/fixtures/openmetrics, Apache-2.0, from prometheus/OpenMetrics).

Every valid case is ingested as prometheus-client's OpenMetrics parser reads it, no case crashes, and for the
invalid ones the table below says which kvdoctor accepts and why; every other invalid case is refused, line named.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from kvdoctor.ingest.parse import ParseError, Parser, parse
from kvdoctor.samples import Sample

SUITE = Path(__file__).parents[1] / "fixtures" / "openmetrics"
CASES = sorted(p.name for p in SUITE.iterdir() if (p / "test.json").is_file())

# Why kvdoctor takes what a strict parser refuses. It reads one line at a time and keeps one value per series:
# what it needs of a page is the samples, which are all well formed in these cases.
COMMENTS = "metadata (HELP, TYPE, UNIT) is a comment to kvdoctor: only TYPE is kept, unchecked, and no sample changes"
SEMANTICS = (
    "a family-level rule (counter sign, bucket order, +Inf bucket, grouping, info/stateset values, name clashes): "
    "not checked per line; out-of-range values are the value checks' job, downstream"
)
WHITESPACE = (
    "extra whitespace or a trailing comma around well-formed tokens: the samples read are unambiguous"
)
EXEMPLAR = "an exemplar is parsed and dropped: where it is allowed, its length and spacing do not matter here"
ACCEPTED: dict[str, str] = {
    "bad_blank_line": WHITESPACE,
    "bad_exemplar_complex_chars": EXEMPLAR,
    "bad_invalid_labels_6": WHITESPACE,
    "bad_missing_or_extra_commas_2": WHITESPACE,
    "bad_metadata": COMMENTS,
    **{f"bad_value_{i}": WHITESPACE for i in (1, 2, 3)},
    **{f"bad_exemplars_{i}": EXEMPLAR for i in range(1, 7)},
    **{f"bad_exemplars_on_unallowed_metric_types_{i}": EXEMPLAR for i in range(3)},
    **{f"bad_exemplars_on_unallowed_samples_{i}": EXEMPLAR for i in range(4)},
    **{f"bad_help_{i}": COMMENTS for i in range(4)},
    **{f"bad_type_{i}": COMMENTS for i in range(8)},
    **{f"bad_unit_{i}": COMMENTS for i in range(8)},
    **{f"bad_metadata_in_wrong_place_{i}": COMMENTS for i in range(3)},
    **{f"bad_repeated_metadata_{i}": COMMENTS for i in range(4)},
    **{f"bad_clashing_names_{i}": SEMANTICS for i in range(3)},
    **{f"bad_counter_values_{i}": SEMANTICS for i in range(20)},
    **{f"bad_histograms_{i}": SEMANTICS for i in range(15)},
    **{f"bad_grouping_or_ordering_{i}": SEMANTICS for i in (0, *range(2, 11))},
    **{f"bad_info_and_stateset_values_{i}": SEMANTICS for i in range(2)},
    **{f"bad_stateset_info_values_{i}": SEMANTICS for i in range(4)},
    **{f"bad_missing_or_invalid_labels_for_a_type_{i}": SEMANTICS for i in range(8)},
}


def _case(name: str) -> tuple[str, bool]:
    meta = json.loads((SUITE / name / "test.json").read_text())
    return (SUITE / name / meta["file"]).read_text(encoding="utf-8"), bool(meta["shouldParse"])


def _ts_ms(ts: Any) -> float | None:
    if ts is None:
        return None
    if hasattr(ts, "sec"):
        return ts.sec * 1000 + ts.nsec / 1e6
    return float(ts) * 1000


def _first_per_series(rows: list[tuple[str, tuple[tuple[str, str], ...], float, float | None]]) -> list[Any]:
    # A page naming one series twice gives the store its first value (the rest are dropped as duplicates).
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    out = []
    for row in rows:
        if (row[0], row[1]) not in seen:
            seen.add((row[0], row[1]))
            out.append(row)
    return out


def _reference(text: str) -> list[Any]:
    rows = [
        (s.name, tuple(sorted(s.labels.items())), s.value, _ts_ms(s.timestamp))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if not s.name.endswith("_created")  # kvdoctor drops _created series, as its docstring says
    ]
    return _first_per_series(rows)


def _ours(samples: list[Sample]) -> list[Any]:
    return _first_per_series([(s.name, tuple(sorted(s.labels)), s.value, s.timestamp_ms) for s in samples])


def _same(a: list[Any], b: list[Any]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        if isinstance(x, float) and isinstance(y, float | int):
            return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-12, abs_tol=1.0)
        return bool(x == y)

    return len(a) == len(b) and all(
        ra[0] == rb[0]
        and ra[1] == rb[1]
        and eq(ra[2], float(rb[2]))
        and (ra[3] is rb[3] is None or eq(ra[3], rb[3]))
        for ra, rb in zip(a, b, strict=True)
    )


def test_the_suite_is_vendored_whole_with_its_licence():
    assert "Apache License" in (SUITE / "LICENSE").read_text()
    valid = [c for c in CASES if _case(c)[1]]
    assert len(CASES) == 211 and len(valid) == 44


@pytest.mark.parametrize("name", [c for c in CASES if _case(c)[1]])
def test_every_valid_case_is_ingested_as_prometheus_client_reads_it(name):
    text, _ = _case(name)
    got = parse(text, openmetrics=True)
    assert _same(_reference(text), _ours(got.samples)), name


@pytest.mark.parametrize("name", [c for c in CASES if not _case(c)[1]])
def test_every_invalid_case_is_refused_naming_the_line_or_accepted_for_a_stated_reason(name):
    text, _ = _case(name)
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(text))  # the strict parser refuses it: the case is what it says
    if name in ACCEPTED:
        got = parse(text, openmetrics=True)  # anything but ParseError here is a crash, and fails the test
        assert isinstance(got.samples, list)
    else:
        with pytest.raises(ParseError, match=r"^line \d+: "):
            parse(text, openmetrics=True)


def test_the_table_names_only_invalid_cases_of_the_suite():
    assert set(ACCEPTED) <= {c for c in CASES if not _case(c)[1]}


def test_exemplars_are_dropped_and_the_page_kept():
    page = (
        "# TYPE a counter\n"
        'a_total{x="y"} 7 # {trace_id="KOO5S4vxi0o"} 0.67\n'
        'b_total 3 1520879607.789 # {trace_id="x"} 1.0 1520879607.789\n'
        'c{v="#{}"} 1\n'
        "# EOF\n"
    )
    samples = parse(page).samples  # a recording carries no content type: `# EOF` says OpenMetrics
    assert [(s.name, s.labels, s.value, s.timestamp_ms) for s in samples] == [
        ("a_total", (("x", "y"),), 7.0, None),
        ("b_total", (), 3.0, 1520879607789),
        ("c", (("v", "#{}"),), 1.0, None),
    ]


def test_timestamps_are_seconds_in_openmetrics_and_milliseconds_in_text():
    assert parse("a 1 1520879607.789\n# EOF\n", openmetrics=True).samples[0].timestamp_ms == 1520879607789
    assert parse("a 1 1520879607789\n", openmetrics=False).samples[0].timestamp_ms == 1520879607789


@pytest.mark.parametrize("ts", ["Inf", "+Inf", "-Inf", "NaN"])
@pytest.mark.parametrize("om", [True, False])
def test_a_non_finite_timestamp_is_refused_naming_the_line(ts, om):
    page = f"a 1\nb 2 {ts}\n" + ("# EOF\n" if om else "")
    with pytest.raises(ParseError, match=rf"^line 2: timestamp {re.escape(ts)} is not a finite number"):
        parse(page, openmetrics=om)


def test_a_truncated_openmetrics_page_or_text_after_eof_is_refused():
    with pytest.raises(ParseError, match="without # EOF"):
        parse("a 1\nb 2\n", openmetrics=True)
    with pytest.raises(ParseError, match=r"line 3: content after # EOF \(line 2\)"):
        parse("a 1\n# EOF\nb 2\n", openmetrics=True)
    assert len(parse("a 1\n# EOF\n", openmetrics=False).samples) == 1  # in text 0.0.4 it is a comment


def test_the_cause_of_a_bad_line_does_not_change_with_its_values():
    causes = set()
    for value in (1, 2, 3):
        with pytest.raises(ParseError) as err:
            Parser().parse(f'a_total{{x="1"}} {value} # {{bad}} 1\n')
        causes.add(err.value.cause)
    assert causes == {"invalid exemplar in a_total"}
