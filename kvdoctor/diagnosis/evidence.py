"""Evidence per (target, model): the rule pack's recorded signals read back into dicts keyed as kvdoctor.signals names them."""

from __future__ import annotations

from collections.abc import Iterable

from kvdoctor.samples import Labels
from kvdoctor.signals import recorded

Key = tuple[str, str]  # (target, model_name)


ENGINE = "engine/"  # evidence keys "engine/<engine>/<key>" until split_engines() takes them apart


def collect(series: Iterable[tuple[Labels, float]]) -> dict[Key, dict[str, float]]:
    """Group (labels, value) pairs of kvdoctor:* series into evidence dicts per (instance, model_name).

    Per-engine signals land under "engine/<engine>/<key>" (see split_engines).
    """
    by_rule = {rule: key for key, rule in recorded(per_instance=False, per_engine=False).items()}
    by_rule_instance = {rule: key for key, rule in recorded(per_instance=True).items()}
    by_rule_engine = {rule: key.removeprefix("engine_") for key, rule in recorded(per_engine=True).items()}
    per_key: dict[Key, dict[str, float]] = {}
    per_instance: dict[str, dict[str, float]] = {}
    for labels, value in series:
        d = dict(labels)
        name = d.get("__name__", "")
        if name in by_rule_engine and "instance" in d:
            key = f"{ENGINE}{d.get('engine', '')}/{by_rule_engine[name]}"
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[key] = value
        elif name in by_rule and "instance" in d:
            per_key.setdefault((d["instance"], d.get("model_name", "")), {})[by_rule[name]] = value
        elif name in by_rule_instance and "instance" in d:
            per_instance.setdefault(d["instance"], {})[by_rule_instance[name]] = value
    for (instance, _), values in per_key.items():
        values.update(per_instance.get(instance, {}))
    return per_key


def split_engines(ev: dict[str, float]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """A collected evidence dict as the target's own keys and {engine: {key: value}} (engines in numeric order)."""
    own: dict[str, float] = {}
    per: dict[str, dict[str, float]] = {}
    for k, v in ev.items():
        if k.startswith(ENGINE):
            engine, _, key = k[len(ENGINE) :].partition("/")
            per.setdefault(engine, {})[key] = v
        else:
            own[k] = v
    return own, dict(sorted(per.items(), key=lambda kv: (len(kv[0]), kv[0])))
