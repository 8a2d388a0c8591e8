"""Config field lookup with aliases, and the error that names a missing field and its file."""

from __future__ import annotations

from kvdoctor.errors import InputError
from kvdoctor.jsondoc import JsonObject, JsonValue


class ModelConfigError(InputError):
    """A config.json we cannot size; the message names the file and the field."""


class Fields:
    """Lookup of config fields with aliases; errors name the canonical field and the file."""

    def __init__(self, cfg: JsonObject, source: str) -> None:
        self.cfg = cfg
        self.source = source

    def get(self, *names: str) -> JsonValue:
        """The first present, non-null value among names, else None."""
        for n in names:
            if self.cfg.get(n) is not None:
                return self.cfg[n]
        return None

    def need(self, *names: str) -> JsonValue:
        """Like get, but a missing field raises ModelConfigError naming it."""
        v = self.get(*names)
        if v is None:
            raise ModelConfigError(f"{self.source}: missing required field {names[0]!r}")
        return v

    def need_int(self, *names: str) -> int:
        """A required positive integer field."""
        v = self.need(*names)
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ModelConfigError(f"{self.source}: field {names[0]!r} must be a positive number, got {v!r}")
        return int(v)
