"""Print the requirements of spark-ckpt's extras, one per line, read from pyproject.toml.

``python scripts/requirements.py [--only] EXTRA...``: the project's own dependencies and those of
each EXTRA (an extra's references to spark-ckpt's other extras followed); with ``--only``, the
extras' requirements alone. The setup installs what it prints before spark-ckpt itself, which
comes later from the release wheel (scripts/test.sh), and scripts/wheel.sh installs the
``release`` extra's build tools into an environment of their own. pip's own resolution of the
checkout without installing it (``--dry-run --report``) cost 50 s more: it builds PySpark's
metadata from its 450 MB sdist.

Runs with the standard library of Python 3.11+ (``tomllib``), or ``tomli`` where installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]


def requirements(pyproject: str, extras: list[str], *, only_extras: bool) -> list[str]:
    """The requirements of ``extras`` (and of the project unless ``only_extras``), in order."""
    with open(pyproject, "rb") as file:
        project = tomllib.load(file)["project"]
    declared = project.get("optional-dependencies", {})
    own = re.compile(re.escape(project["name"]) + r"\[([^\]]+)\]")
    wanted, seen = list(reversed(extras)), set()
    found = [] if only_extras else list(project["dependencies"])
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        if extra not in declared:
            raise SystemExit(f"pyproject.toml declares no extra {extra!r}")
        seen.add(extra)
        for requirement in declared[extra]:
            reference = own.fullmatch(requirement.replace(" ", ""))
            if reference:
                wanted += reference.group(1).split(",")
            else:
                found.append(requirement)
    return found


def main(argv: list[str]) -> None:
    """Print the requirements ``argv`` asks for (see the module docstring)."""
    only_extras = argv[:1] == ["--only"]
    extras = [extra for extra in argv[1:] if extra] if only_extras else [e for e in argv if e]
    pyproject = str(Path(__file__).resolve().parents[1] / "pyproject.toml")
    print("\n".join(requirements(pyproject, extras, only_extras=only_extras)))


if __name__ == "__main__":
    main(sys.argv[1:])
