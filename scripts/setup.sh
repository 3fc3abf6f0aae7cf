#!/usr/bin/env bash
# Shared setup for the README's commands: a virtualenv in .venv with spark-ckpt installed,
# a Java check and, for the tests, PostgreSQL 15 with wal2json and MariaDB from Debian's packages.
# Source it: `source scripts/setup.sh [extra]` (extra: "test" for test tools, PostgreSQL, MariaDB).
# Safe to run again: everything it does is idempotent and quick once done.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRA="${1:-}"

# Each step is stamped with the seconds since the command started, so a slow one shows.
say() { printf '\033[1m[spark-ckpt +%ss]\033[0m %s\n' "$SECONDS" "$*"; }
die() { printf '\033[1;31m[spark-ckpt] error:\033[0m %s\n' "$*" >&2; exit 1; }
# `source setup.sh --helpers`: only ROOT, VENV, say and die, for a script that runs inside an
# environment set up already (scripts/wheel.sh when a test builds the wheel).
if [ "$EXTRA" = "--helpers" ]; then return 0 2>/dev/null || exit 0; fi

# --- Python ------------------------------------------------------------------------------------
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3.13 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON="$(command -v "$candidate")"; break; fi
  done
fi
[ -n "$PYTHON" ] || die "no python3 found: install Python 3.10-3.13 (Debian: apt-get install python3 python3-venv)"
"$PYTHON" - <<'PY' || die "spark-ckpt needs Python 3.10 to 3.13 (PySpark 4.2); set PYTHON=/path/to/python3.11"
import sys
sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)
PY

# --- Java (Spark 4 needs 17 or 21) -------------------------------------------------------------
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$JAVA" >/dev/null 2>&1; then
  die "Spark needs Java 17 or 21 and none was found: install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
fi
JAVA_MAJOR="$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[".].*/\1/p' | head -n1)"
if [ -z "$JAVA_MAJOR" ] || [ "$JAVA_MAJOR" -lt 17 ]; then
  die "Spark 4 needs Java 17 or 21, found '$("$JAVA" -version 2>&1 | head -n1)': install openjdk-17 and set JAVA_HOME"
fi

# --- Rust (the connectors' decoders are partly native, built on install) ----------------------
command -v cargo >/dev/null 2>&1 \
  || die "building spark-ckpt needs Rust's cargo (the connectors' decoders are partly native code): install a Rust toolchain (rustup, or Debian: apt-get install cargo) and run again"

# --- Debian packages: PostgreSQL with wal2json, MariaDB (scripts/debian.sh) ---------------------
# The test command installs them in the background instead (SPARK_CKPT_SETUP_DEBIAN=0 here).
DEBIAN_WANTED=()
if [ "$EXTRA" = "test" ] || [ "${SPARK_CKPT_POSTGRES:-}" = "1" ]; then DEBIAN_WANTED+=(postgres); fi
if [ "$EXTRA" = "test" ] || [ "${SPARK_CKPT_MARIADB:-}" = "1" ]; then DEBIAN_WANTED+=(mariadb); fi
if [ "${#DEBIAN_WANTED[@]}" -gt 0 ] && [ "${SPARK_CKPT_SETUP_DEBIAN:-1}" = 1 ]; then
  "$ROOT/scripts/debian.sh" "${DEBIAN_WANTED[@]}"
fi

# --- virtualenv and packages -------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtualenv in $VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create a virtualenv (Debian: apt-get install python3-venv)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
SPEC="$ROOT"
[ -n "$EXTRA" ] && SPEC="$ROOT[$EXTRA]"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
if [ "${SPARK_CKPT_SETUP_DEPENDENCIES_ONLY:-0}" = 1 ] && "$VENV/bin/python" -c 'import tomllib' 2>/dev/null; then
  # The caller installs spark-ckpt itself (the test command: the release wheel it builds, so the
  # native modules compile once, not once here and again for the wheel). The requirements are
  # read from pyproject.toml (scripts/requirements.py needs tomllib: Python 3.11+; on 3.10 the
  # source install below runs).
  say "installing spark-ckpt's dependencies${EXTRA:+ [$EXTRA]} into .venv (spark-ckpt itself comes later)"
  mkdir -p "$ROOT/build"
  REQUIREMENTS="$ROOT/build/requirements${EXTRA:+-$EXTRA}.txt"
  "$VENV/bin/python" "$ROOT/scripts/requirements.py" ${EXTRA:+"$EXTRA"} >"$REQUIREMENTS"
  "${PIP[@]}" install --quiet -r "$REQUIREMENTS"
else
  say "installing spark-ckpt${EXTRA:+ [$EXTRA]} into .venv (first run downloads PySpark, Delta, pyarrow)"
  # A local directory is always rebuilt and reinstalled, so the venv runs the checkout's code.
  "${PIP[@]}" install --quiet "$SPEC"
fi

# --- the test harness on sys.path --------------------------------------------------------------
# The tests' harness (tests/harness: servers, workloads, fault injection) is the package
# `harness`, imported by the tests, by bench/ and by the drivers it starts in processes of their
# own (`python -m harness.faults.crash ...`, where PYTHONSAFEPATH keeps the working directory off
# sys.path). A .pth file in the venv's site-packages puts tests/ on sys.path of every process the
# venv's python runs, the mechanism editable installs use, so no code edits sys.path. A .pth's
# directories come after site-packages: the installed spark_ckpt still comes first. Written on
# every run (the same line each time; a moved checkout gets its new path).
if [ "$EXTRA" = "test" ]; then
  SITE_PACKAGES="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  printf '%s\n' "$ROOT/tests" >"$SITE_PACKAGES/spark_ckpt_tests.pth"
fi

export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
export PYTHONSAFEPATH=1
