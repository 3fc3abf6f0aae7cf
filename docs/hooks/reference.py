"""The documentation site's reference tables, rendered from the code that defines them.

A MkDocs hook (``hooks:`` in ``mkdocs.yml``): a page line ``<!-- reference: NAME -->`` is
replaced by the table ``NAME`` from :data:`TABLES`, built from what the code itself uses, so the
reference cannot drift from it:

- source and sink options: the :class:`~spark_ckpt.model.options.OptionSpec` tuples the option
  parsers derive their accepted names from (``COMMON_OPTION_SPECS``, each registered connector's
  ``OPTIONS``, ``SINK_OPTIONS``);
- ``spark.ckpt.*`` keys: ``spark_ckpt.model.config.KEYS``, which ``DEFAULTS`` is built from;
- errors: every :class:`~spark_ckpt.errors.SparkCkptError` subclass, with its docstring;
- the CLI: the ``argparse`` parser ``spark-ckpt`` runs (``spark_ckpt.cli.build_parser``);
- metrics: ``spark_ckpt.model.metrics.METRICS``, which the Prometheus exporter serves.

An unknown table name, or an error class or command without a description, fails the build
(and ``tests/unit/test_docs_reference.py``). Runs in the docs build, once per page.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from spark_ckpt import errors
from spark_ckpt.cli import build_parser
from spark_ckpt.model.config import KEYS
from spark_ckpt.model.metrics import METRICS
from spark_ckpt.model.options import OptionSpec
from spark_ckpt.sinks.options import SINK_OPTIONS
from spark_ckpt.sources.options import COMMON_OPTION_SPECS, connector_options_class
from spark_ckpt.sources.registry import CONNECTORS

__all__ = ["TABLES", "MissingReferenceError", "on_page_content", "on_page_markdown", "render"]

_MARKER = re.compile(r"^<!-- reference: ([a-z0-9-]+) -->$", re.MULTILINE)


class MissingReferenceError(Exception):
    """A page asks for a table that does not exist, or the code lacks a description."""


def _cell(text: str) -> str:
    # A table cell is one line; a pipe would end it.
    return " ".join(text.split()).replace("|", "\\|")


def options_table(specs: Iterable[OptionSpec[Any]], heading: str = "option") -> str:
    """A Markdown table of ``specs``: name, default, meaning."""
    rows = [f"| {heading} | default | meaning |", "|---|---|---|"]
    for spec in specs:
        if not spec.meaning.strip():
            raise MissingReferenceError(f"{spec.name} has no meaning to document")
        rows.append(
            f"| `{spec.display_name}` | {_cell(spec.display_default)} | {_cell(spec.meaning)} |"
        )
    return "\n".join(rows) + "\n"


def _source_options() -> str:
    per_partition = ", ".join(
        f"`{connector_options_class(name).CHANGES_PER_PARTITION}` (`{name}`)" for name in CONNECTORS
    )
    return (
        options_table(COMMON_OPTION_SPECS)
        + f"\n`changesPerPartition`'s default per connector: {per_partition}.\n"
    )


def _connector_options(name: str) -> Callable[[], str]:
    return lambda: options_table(connector_options_class(name).OPTIONS)


_ROLE = re.compile(r":(?:class|meth|func|data|attr|mod|exc):`~?([^`]+)`")


def docstring_markdown(doc: str) -> str:
    """A numpydoc docstring's prose (before its first section) as Markdown."""
    prose: list[str] = []
    lines = inspect.cleandoc(doc).splitlines()
    for at, line in enumerate(lines):
        if at + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[at + 1].strip()):
            break  # a numpydoc section (Parameters, Attributes) starts here
        prose.append(line)
    text = "\n".join(prose).strip()
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`")


def error_classes() -> list[type[errors.SparkCkptError]]:
    """Every error class of :mod:`spark_ckpt.errors`, in the order the module defines them."""
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type)
        and issubclass(value, errors.SparkCkptError)
        and value.__module__ == errors.__name__
    ]


def _error_link(error: type[BaseException]) -> str:
    # A spark-ckpt error links to its own section (the heading's anchor); a builtin does not.
    name = error.__name__
    return (
        f"[`{name}`](#{name.lower()})" if issubclass(error, errors.SparkCkptError) else f"`{name}`"
    )


def _errors() -> str:
    sections = []
    for error in error_classes():
        if not error.__doc__:
            raise MissingReferenceError(f"{error.__name__} has no docstring to document")
        bases = ", ".join(_error_link(base) for base in error.__bases__)
        sections.append(
            f"### {error.__name__}\n\n*is a* {bases}\n\n{docstring_markdown(error.__doc__)}\n"
        )
    return "\n".join(sections)


def _sentence(text: str) -> str:
    # argparse help is a lower-case phrase; the reference shows it as a sentence.
    text = _cell(text)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _argument_row(action: argparse.Action) -> str:
    if not action.help:
        raise MissingReferenceError(f"the argument {action.dest!r} has no help to document")
    if action.option_strings:
        name = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
    else:
        name = f"`{action.metavar or action.dest}`"
    return f"| {name} | {_cell(action.help)} |"


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every runnable command below ``parser``: (words, parser, one-line help), in order."""
    found = []
    for action in parser._actions:  # argparse keeps no public list of its sub-commands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for word, sub in action.choices.items():
                nested = commands(sub, (*words, word))
                found.extend(nested or [((*words, word), sub, helps.get(word, ""))])
    return found


def _arguments(parser: argparse.ArgumentParser) -> str:
    # A command's own arguments (not its sub-commands, which get sections of their own).
    rows = [
        _argument_row(a)
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and a.help != argparse.SUPPRESS
    ]
    return "| argument | meaning |\n|---|---|\n" + "\n".join(rows) + "\n" if rows else ""


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def _cli() -> str:
    main = build_parser()
    sections = [
        f"```\n{_usage(main)}\n```\n\n{_cell(main.description or '')}\n\n{_arguments(main)}"
    ]
    for words, parser, summary in commands(main):
        if not summary or not parser.description:
            command = " ".join(words)
            raise MissingReferenceError(f"'{command}' has no help or description to document")
        sections.append(
            f"### spark-ckpt {' '.join(words)}\n\n{_sentence(summary)}\n\n"
            f"```\n{_usage(parser)}\n```\n\n{_cell(parser.description)}\n\n{_arguments(parser)}"
        )
    return "\n".join(sections)


def _metrics() -> str:
    rows = ["| metric | type | labels | meaning | from |", "|---|---|---|---|---|"]
    for spec in METRICS:
        if not spec.help.strip():
            raise MissingReferenceError(f"the metric {spec.name} has no help to document")
        labels = ", ".join(f"`{label}`" for label in spec.labels)
        meaning, origin = _cell(spec.help), _cell(spec.origin)
        rows.append(f"| `{spec.name}` | {spec.kind} | {labels} | {meaning} | {origin} |")
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "source-options": _source_options,
    **{f"{name}-options": _connector_options(name) for name in CONNECTORS},
    "sink-options": lambda: options_table(SINK_OPTIONS),
    "configuration": lambda: options_table(KEYS, heading="key"),
    "errors": _errors,
    "cli": _cli,
    "metrics": _metrics,
}
"""Every table a page can ask for, by name."""


def render(markdown: str) -> str:
    """``markdown`` with each ``<!-- reference: NAME -->`` line replaced by its table.

    Raises
    ------
    MissingReferenceError
        For a name not in :data:`TABLES`.
    """

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise MissingReferenceError(
                f"no reference table {name!r}; the tables are: {', '.join(sorted(TABLES))}"
            )
        return TABLES[name]()

    return _MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: render the page's reference tables (docs build, once per page)."""
    return render(markdown)


# Docstrings use Sphinx roles (:class:`~a.B`), which mkdocstrings shows as written: the role
# before the code span, and a leading ~ inside it (which, as in Sphinx, keeps the last name).
_HTML_ROLE = re.compile(
    r":(?:class|meth|func|data|attr|mod|exc):<code>(?:~(?:[\w.]+\.)?)?([^<]*)</code>"
)


def on_page_content(html: str, **_: Any) -> str:
    """MkDocs hook: drop Sphinx roles from rendered docstrings (docs build, once per page)."""
    return _HTML_ROLE.sub(r"<code>\1</code>", html)
