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


def _defined_errors() -> list[type]:
    out = []
    for info in pkgutil.walk_packages(kvdoctor.__path__, "kvdoctor."):
        if info.name == "kvdoctor.__main__":
            continue
        module = importlib.import_module(info.name)
        out += [
            o
            for o in vars(module).values()
            if inspect.isclass(o) and issubclass(o, KvdoctorError) and o.__module__ == module.__name__
        ]
    return out


def test_every_error_sits_on_a_branch_or_is_documented_internal():
    from kvdoctor.errors import INTERNAL

    roots = (KvdoctorError, InputError, TransportError)
    off_branch = sorted(
        f"{e.__module__}.{e.__qualname__}"
        for e in _defined_errors()
        if e not in roots and not issubclass(e, InputError | TransportError)
    )
    assert off_branch == sorted(INTERNAL), "under InputError/TransportError, or in INTERNAL"


def test_cli_main_maps_each_branch_to_its_exit_code_in_one_line(tmp_path, capsys):
    from kvdoctor.cli import main

    bad = tmp_path / "bad.yml"
    bad.write_text("interval: soon\n")
    assert main(["serve", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"kvdoctor serve: {bad}:1") and "Traceback" not in err and len(err.splitlines()) == 1
    )
    # Nothing listens on port 9: the Prometheus a report reads from does not answer.
    argv = ["report", "--prometheus-url", "http://127.0.0.1:9", "--start", "0", "--end", "3600"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert err.startswith("kvdoctor report: ") and "127.0.0.1:9" in err and len(err.splitlines()) == 1
