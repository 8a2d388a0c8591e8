"""One exception hierarchy: every error kvdoctor defines can be caught as KvdoctorError (and by its branch)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kvdoctor
from kvdoctor.config import ConfigError
from kvdoctor.errors import InputError, KvdoctorError, TransportError, ValidationError
from kvdoctor.ingest.fetch import ScrapeError
from kvdoctor.rules.loader import RuleLoadError
from kvdoctor.sources.client import SourceError
from kvdoctor.web import WebConfigError


def test_every_error_class_of_the_package_derives_from_kvdoctor_error():
    defined = []
    for info in pkgutil.walk_packages(kvdoctor.__path__, "kvdoctor."):
        if info.name == "kvdoctor.__main__":
            continue  # runs the command
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                defined.append(obj)
    assert len(defined) >= 10
    assert [e.__qualname__ for e in defined if not issubclass(e, KvdoctorError)] == []


def test_branches_and_the_errors_list():
    for cls in (ConfigError, RuleLoadError, WebConfigError):
        err = cls(["a.yml:3: first", "a.yml:9: second"])
        assert (
            isinstance(err, ValidationError) and isinstance(err, InputError) and isinstance(err, ValueError)
        )
        assert (
            err.errors == ["a.yml:3: first", "a.yml:9: second"]
            and str(err) == "a.yml:3: first\na.yml:9: second"
        )
    assert issubclass(ScrapeError, TransportError) and issubclass(SourceError, TransportError)
