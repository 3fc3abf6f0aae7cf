"""The documentation's reference covers everything the code accepts, and says what it does.

The site's reference tables are rendered by ``docs/hooks/reference.py`` from the code. These
tests find what the code accepts independently of that renderer (the names the option parsers
hand to their reader, the keys the configuration reads, every error class in the package, every
command the CLI parses) and fail when any of it is missing from the rendered pages. They also
check that each documented default is what leaving the option out gives.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import spark_ckpt
from spark_ckpt import errors
from spark_ckpt.cli import build_parser
from spark_ckpt.model import options as option_model
from spark_ckpt.model.config import DEFAULTS, KEYS, CkptConfig
from spark_ckpt.model.options import OptionSpec, declared_fields
from spark_ckpt.sinks.options import MIRROR_ONLY_OPTIONS, SINK_OPTIONS, SinkOptions
from spark_ckpt.sources.options import COMMON_OPTION_SPECS, SourceOptions, connector_options_class
from spark_ckpt.sources.registry import CONNECTORS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks" / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _hook()


def _site() -> str:
    """Every page of the site as the build renders its Markdown."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)
    return "\n".join(reference.render(p.read_text(encoding="utf-8")) for p in pages)


def _page(name: str) -> str:
    return str(reference.render((DOCS / "reference" / name).read_text(encoding="utf-8")))


def _accepted(parse: Any, options: dict[str, str]) -> tuple[list[str], list[str]]:
    """The names and prefixes ``parse`` hands to its OptionReader (what it accepts)."""
    seen: dict[str, list[str]] = {"names": [], "prefixes": []}
    original = option_model.OptionReader.__init__

    def spy(*args: Any, **kwargs: Any) -> None:
        call = inspect.signature(original).bind(*args, **kwargs)
        call.arguments["names"] = list(call.arguments["names"])  # iterables are read once
        call.arguments["prefixes"] = list(call.arguments.get("prefixes", ()))
        seen["names"] += call.arguments["names"]
        seen["prefixes"] += call.arguments["prefixes"]
        original(*call.args, **call.kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(option_model.OptionReader, "__init__", spy)
        parse(options)
    return seen["names"], seen["prefixes"]


def _source_accepted() -> tuple[list[str], list[str]]:
    return _accepted(SourceOptions.parse, {"connector": "debezium-json", "path": "/tmp/log"})


def _sink_accepted() -> tuple[list[str], list[str]]:
    return _accepted(SinkOptions.parse, {"path": "/tmp/t", "checkpointLocation": "/tmp/c"})


def _rows(page: str) -> set[str]:
    """The first cell of every table row of ``page`` (the option or key, without backticks)."""
    return {
        line.split("|")[1].strip().strip("`")
        for line in page.splitlines()
        if line.startswith("| `")
    }


def _placeholder_rows(prefixes: list[str], rows: set[str]) -> set[str]:
    return {p for p in prefixes if not any(r.startswith(p + "<") for r in rows)}


@pytest.mark.parametrize(
    ("page", "accepted"),
    [("source-options.md", _source_accepted), ("sink-options.md", _sink_accepted)],
    ids=["txn-cdc", "delta-2pc"],
)
def test_every_option_the_parser_accepts_is_in_the_reference(
    page: str, accepted: Callable[[], tuple[list[str], list[str]]]
) -> None:
    names, prefixes = accepted()
    rows = _rows(_page(page))
    assert names
    assert prefixes
    assert set(names) - rows == set()
    assert _placeholder_rows(prefixes, rows) == set()


def test_every_configuration_key_is_in_the_reference() -> None:
    read: list[str] = []

    def get(key: str) -> str | None:
        read.append(key)
        return None

    CkptConfig.from_conf(get)
    assert set(read) == set(DEFAULTS)
    assert set(read) - _rows(_page("configuration.md")) == set()


def _package_modules() -> Iterator[str]:
    for info in pkgutil.walk_packages(spark_ckpt.__path__, "spark_ckpt."):
        # The Spark glue imports pyspark; its modules define no errors of their own (the
        # layering tests keep errors in spark_ckpt.errors), but import them all the same.
        yield info.name


def _all_error_classes() -> set[type[BaseException]]:
    for name in _package_modules():
        importlib.import_module(name)
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [errors.SparkCkptError]
    while todo:
        cls = todo.pop()
        # Only classes a user can name (defined at module level), not a test's local ones.
        if getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is cls:
            found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_in_the_package_is_in_the_reference() -> None:
    page = _page("errors.md")
    documented = {line[4:].strip() for line in page.splitlines() if line.startswith("### ")}
    classes = {cls.__name__ for cls in _all_error_classes()}
    assert len(classes) > 30
    assert classes - documented == set()
    assert "ChangeLogError" in documented
    assert "*is a* [`ConfigError`](#configerror)" in page


def _cli_commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield words, parser
    for action in subcommands:
        for word, sub in action.choices.items():
            yield from _cli_commands(sub, (*words, word))


def test_every_cli_command_and_argument_is_in_the_reference() -> None:
    page = _page("cli.md")
    main = build_parser()
    commands = list(_cli_commands(main))
    assert len(commands) >= 7
    assert "`--version`" in page.split("\n### ", 1)[0], "the command's own --version is missing"
    for words, parser in commands:
        heading = "### spark-ckpt " + " ".join(words)
        assert heading in page, f"{heading!r} is missing"
        section = page.split(heading, 1)[1].split("\n### ", 1)[0]
        for action in parser._actions:
            for name in action.option_strings or [str(action.metavar or action.dest)]:
                if name not in ("-h", "--help"):
                    assert f"`{name}" in section, f"{name} of {heading!r} is missing"


def test_every_reference_marker_in_the_pages_renders_and_every_table_is_used() -> None:
    site = _site()
    assert "<!-- reference:" not in site
    used = {
        line.removeprefix("<!-- reference: ").removesuffix(" -->")
        for p in DOCS.rglob("*.md")
        for line in p.read_text(encoding="utf-8").splitlines()
        if line.startswith("<!-- reference: ")
    }
    assert used == set(reference.TABLES)
    assert {f"{name}-options" for name in CONNECTORS} <= used


def test_a_missing_row_error_or_command_fails_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The checks above can fail: a table without one option's row loses it.
    names, _ = _sink_accepted()
    without = [s for s in SINK_OPTIONS if s.name != "mergeSchema"]
    assert set(names) - _rows(reference.options_table(without)) == {"mergeSchema"}

    # An error class or a CLI command without a description fails the build.
    class UndocumentedError(errors.SparkCkptError):
        pass

    UndocumentedError.__module__ = errors.__name__
    monkeypatch.setattr(errors, "UndocumentedError", UndocumentedError, raising=False)
    with pytest.raises(reference.MissingReferenceError, match="UndocumentedError"):
        reference.render("<!-- reference: errors -->")
    monkeypatch.delattr(errors, "UndocumentedError")

    def parser_with_bare_command() -> argparse.ArgumentParser:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.add_parser("bare")
        return parser

    monkeypatch.setattr(reference, "build_parser", parser_with_bare_command)
    with pytest.raises(reference.MissingReferenceError, match="'bare'"):
        reference.render("<!-- reference: cli -->")

    def parser_with_bare_argument() -> argparse.ArgumentParser:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.add_parser("new", help="a command", description="A command.").add_argument("--bare")
        return parser

    monkeypatch.setattr(reference, "build_parser", parser_with_bare_argument)
    with pytest.raises(reference.MissingReferenceError, match="'bare' has no help"):
        reference.render("<!-- reference: cli -->")

    with pytest.raises(reference.MissingReferenceError, match="no reference table 'nope'"):
        reference.render("<!-- reference: nope -->")


_SOURCE_BASES = {
    "debezium-json": {"path": "/tmp/log"},
    "kafka": {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"},
    "mysql": {"user": "cdc", "tables": "shop.orders"},
    "postgres": {"dsn": "postgresql://u@h/db", "slot": "s", "tables": "public.t"},
}


def _defaulted(specs: tuple[OptionSpec[Any], ...]) -> list[OptionSpec[Any]]:
    # An empty default (no topics, no columns) is shown as a note, not as a value to write.
    return [s for s in specs if s.default not in (None, ()) and s.type is not None]


def _as_written(spec: OptionSpec[Any]) -> str:
    """The default as the reference shows it: what a user would write."""
    assert spec.type is not None
    return str(spec.type.render(spec.default))


@pytest.mark.parametrize("connector", list(CONNECTORS))
def test_each_documented_source_default_is_what_leaving_the_option_out_gives(
    connector: str,
) -> None:
    base = {"connector": connector, **_SOURCE_BASES[connector]}
    specs = _defaulted(COMMON_OPTION_SPECS + connector_options_class(connector).OPTIONS)
    assert specs
    for spec in specs:
        given = SourceOptions.parse({**base, spec.name: _as_written(spec)})
        assert given == SourceOptions.parse(base), f"{spec.name}={spec.default} is not the default"


def test_each_documented_sink_default_is_what_leaving_the_option_out_gives() -> None:
    base = {"path": "/tmp/t", "checkpointLocation": "/tmp/c"}
    for spec in _defaulted(SINK_OPTIONS):
        # Mirror options are compared in mirror mode.
        own = {**base, "mode": "mirror"} if spec.name in MIRROR_ONLY_OPTIONS else base
        given = SinkOptions.parse({**own, spec.name: _as_written(spec)})
        assert given == SinkOptions.parse(own), f"{spec.name}={spec.default} is not the default"


def _options_classes() -> list[type[Any]]:
    return [SourceOptions, SinkOptions, *(connector_options_class(c) for c in CONNECTORS)]


@pytest.mark.parametrize("cls", _options_classes(), ids=lambda cls: cls.__name__)
def test_every_parsed_default_is_the_declarations(cls: type[Any]) -> None:
    """Each option's default is written once, in its declaration: the parsers derive theirs.

    Every field of an options class that an option fills is declared from that option, so the
    dataclass's default is the declaration's; parsing with the option left out gives it; and the
    declaration is the one the reference's table renders.
    """
    fields = declared_fields(cls)
    assert fields, f"{cls.__name__} declares no field from its options"
    listed = {
        spec.name
        for spec in (
            SINK_OPTIONS
            if cls is SinkOptions
            else COMMON_OPTION_SPECS
            if cls is SourceOptions
            else cls.OPTIONS
        )
    }
    for name, spec in fields.items():
        assert spec.name in listed, f"{cls.__name__}.{name} is filled by an undocumented option"
        default = {f.name: f.default for f in dataclasses.fields(cls)}[name]
        if not spec.required:
            assert default == spec.default, f"{cls.__name__}.{name}'s default is not its option's"
    if cls is SourceOptions:
        given = {"connector": "debezium-json", "path": "/tmp/log"}
        parsed: Any = SourceOptions.parse(given)
    elif cls is SinkOptions:
        given = {"path": "/tmp/t", "checkpointLocation": "/tmp/c"}
        parsed = SinkOptions.parse(given)
    else:
        connector = next(c for c in CONNECTORS if connector_options_class(c) is cls)
        given = {"connector": connector, **_SOURCE_BASES[connector]}
        parsed = SourceOptions.parse(given).connector_options
    for name, spec in fields.items():
        if not spec.required and spec.name not in given:
            assert getattr(parsed, name) == spec.default, f"{cls.__name__}.{name} left out"


def test_the_configuration_defaults_are_the_documented_ones() -> None:
    documented = {k.name: k.default for k in KEYS}
    assert documented == DEFAULTS
    assert CkptConfig.from_conf(documented.get) == CkptConfig.from_conf(lambda key: None)
