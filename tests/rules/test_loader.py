"""Rule files are validated whole: every problem is reported at once, naming the file, line, rule and position."""

from __future__ import annotations

import pytest

from kvdoctor.config.durations import parse_duration
from kvdoctor.rules.loader import RuleLoadError, load_files
from kvdoctor.rules.templates import expand

BROKEN = """\
groups:
  - name: g
    rules:
      - record: ok:series
        expr: sum(vllm:num_requests_running)
      - alert: Unsupported
        expr: |
          sum(rate(x[5m]))
            + holt_winters(x[5m], 0.1, 0.1)
      - record: bad
        expr: sum(rate(x[5m])
      - alert: BadFor
        expr: up == 0
        for: soon
        annotations: {summary: "{{ with query \\"up\\" }}x{{ end }}"}
      - record: has:for
        expr: up
        for: 1m
  - name: g
    rules: []
"""


def test_every_error_is_reported_with_file_line_rule_and_position(tmp_path):
    f = tmp_path / "rules.yml"
    f.write_text(BROKEN)
    with pytest.raises(RuleLoadError) as err:
        load_files([f])
    errors = err.value.errors
    joined = "\n".join(errors)
    assert (
        f"{f}:6: rule 'Unsupported': expr parse error: unknown function with name 'holt_winters' (at line 2, column 5)"
        in joined
    )
    assert f"{f}:10: rule 'bad': expr parse error: unclosed left parenthesis (at line 1, column 4)" in joined
    assert f"{f}:12: rule 'BadFor': invalid `for` duration" in joined
    assert "unsupported template action" in joined
    assert (
        f"{f}:16: rule 'has:for': `for`, `keep_firing_for` and `annotations` are for alerting rules only"
        in joined
    )
    assert "group 'g' defined more than once" in joined
    assert len(errors) >= 6


def test_constructs_the_evaluator_lacks_are_refused_at_load(tmp_path):
    f = tmp_path / "r.yml"
    f.write_text("groups: [{name: g, rules: [{record: a, expr: 'count_values(\"v\", up)'}]}]\n")
    with pytest.raises(RuleLoadError, match=r"aggregation count_values\(\) is not supported .*column 1"):
        load_files([f])


def test_broken_yaml_names_the_line(tmp_path):
    f = tmp_path / "r.yml"
    f.write_text("groups:\n  - name: g\n    rules: [\n")
    with pytest.raises(RuleLoadError, match=rf"{f}:\d+: invalid YAML"):
        load_files([f])


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15), ("1m30s", 90), ("2h", 7200), ("0", 0), ("100ms", 0.1)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_templates_match_prometheus_humanizers():
    labels = {"instance": "gpu-1:8000"}
    assert (
        expand("{{ $labels.instance }} at {{ $value | humanizePercentage }}", labels, 0.934)
        == "gpu-1:8000 at 93.4%"
    )
    assert expand("{{ $value | humanizeDuration }}", {}, 0.075) == "75ms"
    assert expand("{{ $value | humanize }}", {}, 1234567) == "1.235M"
    assert expand('{{ printf "%.2f" $value }}', {}, 1.0 / 3) == "0.33"
