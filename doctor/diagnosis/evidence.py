"""Evidence per (target, model): the rule pack's recorded signals read back into dicts keyed as doctor.signals names them."""

from __future__ import annotations

from collections.abc import Iterable

from doctor.samples import Labels
from doctor.signals import recorded

Key = tuple[str, str]  # (target, model_name)


def collect(series: Iterable[tuple[Labels, float]]) -> dict[Key, dict[str, float]]:
    """Group (labels, value) pairs of kvdoctor:* series into evidence dicts per (instance, model_name)."""
    by_rule = {rule: key for key, rule in recorded(per_instance=False).items()}
    by_rule_instance = {rule: key for key, rule in recorded(per_instance=True).items()}
    per_key: dict[Key, dict[str, float]] = {}
    per_instance: dict[str, dict[str, float]] = {}
    for labels, value in series:
        d = dict(labels)
        name = d.get("__name__", "")
        if name in by_rule and "instance" in d:
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[by_rule[name]] = value
        elif name in by_rule_instance and "instance" in d:
            per_instance.setdefault(d["instance"], {})[by_rule_instance[name]] = value
    for (instance, _), values in per_key.items():
        values.update(per_instance.get(instance, {}))
    return per_key
