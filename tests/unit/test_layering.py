"""The layout's promises (DESIGN.md §3), checked on the installed package.

The pure model imports no pyspark and does no I/O; only the Spark glue imports pyspark; the
control plane never imports the sources or the sink; sources and sinks never reach into the
Spark glue; connectors do not import each other; and no import cycle exists at any level.
Imports are read from the source text (AST), so a lazy import counts where it is written.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import spark_ckpt
from spark_ckpt.errors import SparkCkptError

PACKAGE = Path(spark_ckpt.__file__).parent

SPARK_GLUE = {
    "spark_ckpt.spark.consistent",
    "spark_ckpt.spark.control",
    "spark_ckpt.spark.jvm_logging",
    "spark_ckpt.spark.listener",
    "spark_ckpt.spark.packages",
    "spark_ckpt.spark.session",
    "spark_ckpt.spark.supervisor",
    "spark_ckpt.sources.reader",
    "spark_ckpt.sources.datasource",
    "spark_ckpt.sinks.datasource",
    "spark_ckpt.sinks.writer",
}
"""The only modules that may import pyspark."""

IO_MODULES = {"os", "io", "shutil", "subprocess", "tempfile", "socket", "pathlib", "fcntl"}


@dataclass(frozen=True)
class Import:
    target: str
    module_level: bool  # executed when the importing module is imported


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, *, type_checking: bool = False) -> list[Import]:
    """Every runtime import in module ``name`` (and those under TYPE_CHECKING if asked)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for other in child.orelse:
                    visit(other, top)
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.append(Import(base, top))
                # `from pkg import module` imports a submodule too.
                found.extend(
                    Import(f"{base}.{alias.name}", top)
                    for alias in child.names
                    if f"{base}.{alias.name}" in MODULES
                )
            is_def = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, top and not is_def)

    visit(ast.parse(path.read_text()), True)
    return found


def targets(name: str, *, module_level_only: bool = False, type_checking: bool = False) -> set[str]:
    found = imports_of(name, type_checking=type_checking)
    return {i.target for i in found if i.module_level or not module_level_only}


def under(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_pure_modules_import_no_pyspark_in_a_fresh_interpreter() -> None:
    """Every module outside the Spark glue imports, all together, without pyspark or py4j."""
    pure = sorted(set(MODULES) - SPARK_GLUE)
    code = (
        "import importlib, sys\n"
        f"for name in {pure!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in ('pyspark', 'py4j') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "", f"a pure module imported {out.stdout.strip()}"
    assert len(pure) > 40  # the check ran over the whole package


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_spark_glue_imports_pyspark(name: str) -> None:
    """Pyspark appears in the imports of the glue modules only (lazy imports count)."""
    uses_pyspark = any(under(t, "pyspark", "py4j", "delta") for t in targets(name))
    if name in SPARK_GLUE:
        return
    assert not uses_pyspark, f"{name} imports pyspark but is not Spark glue"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if under(n, "spark_ckpt.model")))
def test_the_model_is_pure(name: str) -> None:
    """spark_ckpt/model/ imports only the standard library's non-I/O parts, errors and itself."""
    for target in targets(name):
        if target.startswith("spark_ckpt"):
            assert under(target, "spark_ckpt.model", "spark_ckpt.errors"), (name, target)
        else:
            assert target.split(".")[0] not in IO_MODULES, (name, target)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if under(n, "spark_ckpt.state")))
def test_state_builds_on_the_model_only(name: str) -> None:
    """spark_ckpt/state/ never imports the Spark glue, the sources or the sink."""
    for target in targets(name):
        assert not under(
            target, "spark_ckpt.spark", "spark_ckpt.sources", "spark_ckpt.sinks", "pyspark"
        ), (name, target)


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if not under(n, "spark_ckpt.sources", "spark_ckpt.sinks"))
)
def test_the_control_plane_never_imports_sources_or_sinks(name: str) -> None:
    """spark_ckpt/ finds sources and sinks through entry points, never by import."""
    for target in targets(name):
        assert not under(target, "spark_ckpt.sources", "spark_ckpt.sinks"), (name, target)


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if under(n, "spark_ckpt.sources", "spark_ckpt.sinks"))
)
def test_sources_and_sinks_never_reach_into_the_spark_glue(name: str) -> None:
    """They build on spark_ckpt's model and state, not on its Spark side."""
    for target in targets(name):
        assert not under(target, "spark_ckpt.spark"), (name, target)


CONNECTORS = (
    "spark_ckpt.sources.debezium",
    "spark_ckpt.sources.kafka",
    "spark_ckpt.sources.mysql",
    "spark_ckpt.sources.postgres",
)

SHARED_FORMATS = ("spark_ckpt.sources.debezium_format",)
"""Formats several connectors read (Debezium's, from files and from Kafka): any connector may
import them, as Flink CDC's connectors import ``flink-connector-debezium``."""


@pytest.mark.parametrize("name", sorted(n for n in MODULES if under(n, "spark_ckpt.sources")))
def test_connectors_stay_in_their_folders(name: str) -> None:
    """Connectors import the framework and the shared formats, never each other.

    The framework names connectors in one place only, :mod:`spark_ckpt.sources.registry`, as
    import paths loaded on use; a shared format imports no connector.
    """
    own = next((c for c in CONNECTORS if under(name, c)), None)
    for target in targets(name, type_checking=True):
        for connector in CONNECTORS:
            if under(target, connector) and connector != own:
                raise AssertionError(f"{name} imports {target}")


def test_the_connectors_share_debeziums_format_as_equals() -> None:
    """``debezium-json`` and ``kafka`` both read it; it belongs to neither."""
    for connector in ("spark_ckpt.sources.debezium", "spark_ckpt.sources.kafka"):
        reached = {t for n in MODULES if under(n, connector) for t in targets(n)}
        assert any(under(t, *SHARED_FORMATS) for t in reached), connector
    assert not any(under(n, *CONNECTORS) for f in SHARED_FORMATS for n in _reached(f))


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module in ``graph`` (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def _import_graph() -> dict[str, set[str]]:
    """Every import inside the package, at any level: module level, in functions, for types."""
    return {
        name: {t for t in targets(name, type_checking=True) if t in MODULES and t != name}
        for name in MODULES
    }


def test_no_import_cycles_at_any_level() -> None:
    """No two modules import each other, directly or through others, wherever the import is.

    A function-level import breaks a cycle for the interpreter, not for a reader: the two
    modules still cannot be understood apart. Imports under ``TYPE_CHECKING`` count too (one
    names the other's types).
    """
    graph = _import_graph()
    assert sum(len(t) for t in graph.values()) > 300, "the import graph looks empty"
    cycles = import_cycles(graph)
    assert len(cycles) == 0, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import() -> None:
    graph = _import_graph()
    # The options module importing its connector inside a function, as it did before issue 40.
    graph["spark_ckpt.sources.postgres.options"].add("spark_ckpt.sources.postgres.connector")
    cycles = import_cycles(graph)
    assert len(cycles) == 1
    assert {
        "spark_ckpt.sources.postgres.options",
        "spark_ckpt.sources.postgres.connector",
    } <= set(cycles[0])


RUNTIME_LIBRARIES = (
    "pyspark",
    "pyarrow",
    "psycopg",
    "confluent_kafka",
    "deltalake",
    "py4j",
    "pymysql",
    "pymysqlreplication",
)
"""Third-party packages that reach servers, files or a JVM: runtime, never imported by options."""

OPTIONS_MODULES = sorted(
    n
    for n in MODULES
    if under(n, "spark_ckpt.sources", "spark_ckpt.sinks") and n.rpartition(".")[2] == "options"
)


def _reached(name: str) -> set[str]:
    """Every module of the package that importing ``name`` imports, transitively."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(
            t for t in targets(module, module_level_only=True) if t in MODULES and t not in seen
        )
    return seen


@pytest.mark.parametrize("name", OPTIONS_MODULES)
def test_options_are_data_and_import_no_runtime(name: str) -> None:
    """Parsing a connector's or the sink's options imports no connector, storage, client or JVM.

    Options are declarations and the values read from them; the registry names the builder
    that turns them into a connector. So options parse (and their errors show) without any
    of the connector's dependencies, and no options module can form a cycle with runtime code.
    """
    for module in sorted(_reached(name)):
        imported = targets(module, module_level_only=True)
        libraries = {t for t in imported if under(t, *RUNTIME_LIBRARIES)}
        io = {t for t in imported if t.split(".")[0] in IO_MODULES}
        assert not libraries | io, f"{name} imports {module}, which imports {libraries | io}"
        assert not under(module, "spark_ckpt.state") or module.endswith("storage_options"), (
            f"{name} imports {module}, part of the state layer's runtime"
        )


def test_the_options_check_sees_a_runtime_import() -> None:
    assert len(OPTIONS_MODULES) == 6, OPTIONS_MODULES
    assert "spark_ckpt.sinks.options" in OPTIONS_MODULES
    assert "spark_ckpt.state.storage" in _reached("spark_ckpt.sources.debezium.log_files")


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_EDGE = re.compile(r"^\s*(\w+)\s*-(?:->|\.->)\s*(\w+)\s*$")


def _is_package(name: str) -> bool:
    return name in MODULES and MODULES[name].name == "__init__.py"


def component(name: str) -> str:
    """The box of docs/architecture.md's picture that module ``name`` belongs to.

    The layers are ``spark_ckpt``'s subpackages; in ``sources`` and ``sinks`` each subpackage
    (a connector, a shared format, the mirror) is a box of its own; ``spark_ckpt`` itself and
    its top-level modules (the CLI) are the public API, except the error tree.
    """
    if name == "spark_ckpt.errors":
        return "errors"
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and not _is_package(name)):
        return "api"
    if parts[1] in ("sources", "sinks") and _is_package(".".join(parts[:3])):
        return parts[2]
    return parts[1]


def drawn_edges() -> set[tuple[str, str]]:
    """The arrows of the picture: ``(importer, imported)`` box names."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("```mermaid", 1)[1].split("```", 1)[0]
    return {m.groups() for line in block.splitlines() if (m := _EDGE.match(line))}


def code_edges() -> set[tuple[str, str]]:
    """The imports between boxes that the code makes, at any level."""
    return {
        (component(name), component(target))
        for name, imported in _import_graph().items()
        for target in imported
        if component(name) != component(target)
    }


def test_the_architecture_picture_allows_every_import() -> None:
    """Every import between packages is an arrow of docs/architecture.md's picture."""
    drawn = drawn_edges()
    assert len(drawn) > 30, "the picture's arrows were not found"
    boxes = {box for edge in drawn for box in edge}
    found = code_edges()
    assert {box for edge in found for box in edge} <= boxes, "a package has no box"
    assert found - drawn == set(), "imports the picture does not allow"
    assert drawn - found == set(), "arrows no import uses any more"


# Raises that are not errors a user sees: the abstract-method convention, and the attribute
# protocol of a module's __getattr__ (PEP 562).
_NOT_USER_ERRORS = {"NotImplementedError", "AttributeError"}
# Raised on purpose and caught inside the package: a concurrent Delta commit, which the
# publisher answers by re-reading the table's txn version (delta-rs's commits, and the
# deletion-vector commits spark-ckpt writes itself, and a schema commit that another commit
# overtook before a mirror's deletion-vector commit).
_CAUGHT_INSIDE = {
    ("spark_ckpt.sinks.table", "CommitFailedError"),
    ("spark_ckpt.sinks.mirror.dv_commit", "CommitFailedError"),
    ("spark_ckpt.sinks.mirror.publish", "CommitFailedError"),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_error_raised_is_a_spark_ckpt_error(name: str) -> None:
    """Each ``raise X(...)`` names a SparkCkptError subclass (errors.py's promise)."""
    module = importlib.import_module(name)
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if not isinstance(target, ast.Name) or target.id in _NOT_USER_ERRORS:
            continue  # re-raising a caught error, or calling a helper that builds one
        if (name, target.id) in _CAUGHT_INSIDE:
            continue
        raised = getattr(module, target.id, None)
        if isinstance(raised, type):
            assert issubclass(raised, SparkCkptError), f"{name}:{node.lineno} raises {target.id}"


def test_the_public_api_names_resolve_and_export_every_error() -> None:
    """Each name in spark_ckpt.__all__ exists (Spark-facing ones load on first access)."""
    from spark_ckpt import errors

    for name in spark_ckpt.__all__:
        assert getattr(spark_ckpt, name) is not None, name
    assert set(errors.__all__) <= set(spark_ckpt.__all__)
