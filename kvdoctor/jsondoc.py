"""JSON documents at kvdoctor's edges: outside data on its way in, JSON on its way out.

A value that crosses a package boundary inside kvdoctor is a dataclass, NamedTuple or Enum. These two names are
for the documents that are JSON by nature: a YAML section or a pod from the Kubernetes API before its loader has
read it, a state file or outbox row on disk, and what `to_json`/`to_dict`/`to_state` make for a user, a file or
a sink. `tests/test_seams.py` fails on an untyped dict that crosses a package under any other name.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]  # one JSON object ({…}), as json.loads/yaml.safe_load give it
JsonValue: TypeAlias = Any  # any JSON value: an object, a list, a string, a number, true/false, null
