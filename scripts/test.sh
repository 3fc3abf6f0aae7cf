#!/usr/bin/env bash
# The test suite: lint, types, unit tests (no JVM) and integration tests (real Spark + Delta).
# Sets up .venv and checks Java on first use. Extra arguments go to pytest.
#   ./scripts/test.sh            the whole suite (the CI gate)
#   ./scripts/test.sh --quick    the edit loop: lint, types, unit tests and the integration tests
#                                marked `quick` (one per component), Connect's included
#   ./scripts/test.sh --soak     lint, types, then the tests marked `soak`: the scenarios the
#                                whole suite leaves out for its time budget (bench/soak.sh)
#   ./scripts/test.sh ARGS       lint, types, then pytest ARGS (a file, -k ...)
set -euo pipefail
QUICK=0
SOAK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
if [ "${1:-}" = "--soak" ]; then SOAK=1; shift; fi
# The whole suite and the soak tier test the wheel a release publishes (scripts/wheel.sh), built
# before any check and installed in place of a source build: its native modules compile once
# (a source install compiled them as well: 108 s of a fresh clone's 224 s of setup).
RELEASE_WHEEL=0
if [ "$SOAK" = 1 ] || { [ "$QUICK" = 0 ] && [ $# = 0 ]; }; then RELEASE_WHEEL=1; fi

# The Rust checks need only cargo and the sources, so they start first, in the background: they
# compile on both cores while Debian's and pip's packages install, which is mostly downloading
# and unpacking on one core (pip: 113 s of wall time for 92 s of CPU here, warm cache), and are
# waited for where they used to run.
CARGO_WORKSPACE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/sources/Cargo.toml"
CARGO_LOG="$(dirname "$CARGO_WORKSPACE")/target/spark-ckpt-checks.log"
CARGO_PID=""
PACKAGES_PID=""
WHEEL_PID=""
DEBIAN_PID=""
ARCHIVE_PID=""
# Background jobs run in a session and process group of their own (setsid), so that an exit
# before their wait stops everything they started (compilers, a JVM, apt-get).
stop_background() {
    local pid
    for pid in "$CARGO_PID" "$PACKAGES_PID" "$WHEEL_PID" "$DEBIAN_PID" "$ARCHIVE_PID"; do
        if [ -n "$pid" ]; then kill -TERM -- "-$pid" 2>/dev/null || true; fi
    done
}
trap stop_background EXIT
if command -v cargo >/dev/null 2>&1; then
    mkdir -p "$(dirname "$CARGO_LOG")"
    setsid bash -c '
        set -e
        cargo fmt --manifest-path "$1" --all --check
        # Clippy lints the workspace while its tests compile: clippy-driver compiles the
        # workspace members (what `cargo clippy` itself runs, in check mode) and every warning is
        # an error, as `cargo clippy -- -D warnings` made it; the dependencies compile with rustc
        # and their lints capped, as always. One compile instead of two: on a fresh target
        # directory, `cargo clippy --all-targets` and then `cargo test` took 78 + 76 s of CPU,
        # this 88 s. The debug profile: building the tests with it cost 68 s of CPU against 95 s
        # for --release on top of the release build (which LTO-links each test binary); the
        # tests themselves run in well under a second either way. (--all-targets leaves the
        # examples in the documentation out: --doc runs them.)
        CLIPPY_DRIVER="$(command -v clippy-driver)" \
            || { echo "clippy-driver not found: rustup component add clippy" >&2; exit 1; }
        export RUSTC_WORKSPACE_WRAPPER="$CLIPPY_DRIVER" RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
        cargo test --quiet --manifest-path "$1" --workspace --all-targets
        cargo test --quiet --manifest-path "$1" --workspace --doc
    ' cargo-checks "$CARGO_WORKSPACE" >"$CARGO_LOG" 2>&1 </dev/null &
    CARGO_PID=$!
fi
# waits for a background job; its log is printed, and a failure ends the run with the job's name.
wait_for() {
    local pid="$1" log="$2" what="$3" status=0
    wait "$pid" || status=$?
    cat "$log"
    [ "$status" = 0 ] || die "$what failed (exit $status): the output is above"
}
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$SCRIPTS/../build"
# The release wheel needs neither .venv nor the Python packages (its build tools have an
# environment of their own), and the tests' servers come from Debian's packages: both start now,
# beside pip's install of the packages. On a fresh clone the wheel's build had taken 135 s and
# the Debian packages 53 s, one after the other and after pip's 159 s; side by side the setup
# took 351 s against 384 s, not less: they compete for the two cores (pip then took 259 s).
WHEEL_LOG="$SCRIPTS/../build/wheel.log"
if [ "$RELEASE_WHEEL" = 1 ]; then
    setsid "$SCRIPTS/wheel.sh" >"$WHEEL_LOG" 2>&1 </dev/null &
    WHEEL_PID=$!
fi
DEBIAN_LOG="$SCRIPTS/../build/debian.log"
setsid "$SCRIPTS/debian.sh" postgres mariadb >"$DEBIAN_LOG" 2>&1 </dev/null &
DEBIAN_PID=$!
SPARK_CKPT_SETUP_DEBIAN=0 SPARK_CKPT_SETUP_DEPENDENCIES_ONLY="$RELEASE_WHEEL" source "$SCRIPTS/setup.sh" test
cd "$ROOT"
[ -n "$CARGO_PID" ] && say "cargo fmt, clippy and test: started in the background before the setup (log: $CARGO_LOG)"
[ -n "$WHEEL_PID" ] && say "the release wheel (scripts/wheel.sh): building in the background since the start (log: $WHEEL_LOG)"
say "PostgreSQL and MariaDB from Debian's packages (scripts/debian.sh): installing in the background since the start (log: $DEBIAN_LOG)"

# Spark's packages for the tests' sessions (Delta, s3a, Spark's Kafka source), resolved once and
# remembered (harness/spark_packages.py), so that the two pytest processes never resolve them side
# by side. Mostly downloads on a fresh machine, so in the background, beside the wheel's build:
# from the checkout (PYTHONPATH), as spark-ckpt is not installed yet.
PACKAGES_LOG="$ROOT/build/spark-packages.log"
if [ "$QUICK" = 1 ] || [ "$SOAK" = 1 ] || [ $# = 0 ]; then
    mkdir -p "$ROOT/build"
    say "Spark's packages (Delta, s3a, Spark's Kafka source): resolving in the background (log: $PACKAGES_LOG)"
    PYTHONPATH="$ROOT" PYTHONSAFEPATH=1 setsid "$VENV/bin/python" -m harness.spark_packages \
        >"$PACKAGES_LOG" 2>&1 </dev/null &
    PACKAGES_PID=$!
fi

build_wheel() {
    # The cluster tests' executors run the wheel from a packed environment (no Rust there).
    # Other runs build it on demand when they select a cluster test.
    say "the release wheel: waiting for its build"
    wait_for "$WHEEL_PID" "$WHEEL_LOG" "scripts/wheel.sh"
    WHEEL_PID=""
    shopt -s nullglob
    WHEELS=("$ROOT"/dist/spark_ckpt-*-manylinux*.whl)
    shopt -u nullglob
    [ "${#WHEELS[@]}" = 1 ] || die "scripts/wheel.sh left ${#WHEELS[@]} manylinux wheels in dist/"
    export SPARK_CKPT_TEST_WHEEL="${WHEELS[0]}"
}
if [ "$RELEASE_WHEEL" = 1 ]; then
    build_wheel
    say "installing the wheel into .venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --force-reinstall "$SPARK_CKPT_TEST_WHEEL"
fi

# Every JVM the tests start (Spark drivers, executors and cluster daemons, Kafka, Kafka Connect,
# Maven) compiles with C1 only and collects garbage serially: test JVMs live seconds to minutes on
# two cores, where C2's compiler threads and the parallel collector's threads cost more CPU than
# they give back. Measured side by side on four integration modules (26 tests, -n 2, two runs
# each): 307 s -> 258 s wall (median), 598 -> 483 s of CPU; the whole main run barely moved
# (2,657 s -> 2,616 s, one run each): its time is mostly the kill tests' driver restarts. Tests
# only: bench/ and the demo run with the JVM's defaults. The java launcher notes the variable on
# stderr.
export JDK_JAVA_OPTIONS="${JDK_JAVA_OPTIONS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
if [ -n "$PACKAGES_PID" ]; then
    say "Spark's packages: waiting for their resolution"
    wait_for "$PACKAGES_PID" "$PACKAGES_LOG" "the resolution of Spark's packages"
    PACKAGES_PID=""
fi
# The crash drivers' class-data-sharing archive (tests/harness/faults/jvm_archive.py: a small
# driver run, about 35 s of CPU), dumped in the background from here, beside the type check and
# the documentation's build, which use one core of two: the first crash test waits on the
# archive's lock instead of dumping it in the middle of the run. A failed dump is dumped again
# by that test, which fails if it fails again.
ARCHIVE_LOG="$ROOT/build/jvm-archive.log"
if [ "$RELEASE_WHEEL" = 1 ]; then
    say "the crash drivers' JVM archive: dumping in the background (log: $ARCHIVE_LOG)"
    PYTHONSAFEPATH=1 setsid "$VENV/bin/python" -m harness.faults.jvm_archive ensure \
        >"$ARCHIVE_LOG" 2>&1 </dev/null &
    ARCHIVE_PID=$!
fi

say "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .

say "cargo fmt, clippy and test (the connectors' native parts and what they share): waiting for them"
# One workspace (sources/Cargo.toml): its dependencies compile once for every crate in it.
if [ -n "$CARGO_PID" ]; then
    wait_for "$CARGO_PID" "$CARGO_LOG" "cargo fmt, clippy or test"
    CARGO_PID=""
fi

say "mypy --strict on the installed packages"
# Checked as installed: sources/ and sinks/ only exist as spark_ckpt.sources / .sinks there.
(cd "$VENV" && "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" -p spark_ckpt)
# The workers' launcher is a top-level module of the standard library only: checked as a file.
(cd "$VENV" && "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" "$ROOT/spark_ckpt_python.py")
# The docs build's reference renderer imports the installed packages: checked beside them.
(cd "$VENV" && "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" "$ROOT/docs/hooks/reference.py")

say "the documentation site, built strictly (mkdocs build --strict)"
# The reference tables render from the installed code (docs/hooks/reference.py): an option, key,
# error or command the code defines but cannot describe fails here, as does a broken link.
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$ROOT/build/site"

export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
# The tests' own modules byte-compiled once, as pip compiles what it installs: where
# PYTHONDONTWRITEBYTECODE is set (as on these machines), Python never caches what it
# compiles, and every driver, planner and worker process the tests start would compile the
# harness from source again.
"$VENV/bin/python" -m compileall -q "$ROOT/tests" >/dev/null
# Two pytest processes (pytest-xdist) share the tests: integration tests mostly wait on JVMs,
# triggers and servers, so one process leaves a core idle much of the time. A test module is the
# unit of distribution (--dist loadfile): a module's expensive fixtures (the cluster, the crash
# chain, a second S3 server) start once, in one process. (--dist loadgroup would allow finer
# groups, but xdist 3.8 cannot tag pytest 9.2's node ids, so its groups are silently ignored.)
# The modules go out longest first (tests/harness/schedule.py, from tests/module_seconds.json),
# in the collection's order (--no-loadscope-reorder): xdist's own order (most tests first) left
# the one-test modules, minutes long some of them, for the end, where one process often ran
# alone (190 s of one run's 1,648 s).
# -n 0 in ARGS runs everything in one process; SPARK_CKPT_TEST_WORKERS sets the count.
PYTEST=("$VENV/bin/pytest" -p no:cacheprovider -n "${SPARK_CKPT_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
# The slowest tests are printed at the end of every run, so growth is seen when it happens.
DURATIONS=(--durations=10 --durations-min=1.0)

say "PostgreSQL and MariaDB: waiting for Debian's packages"
wait_for "$DEBIAN_PID" "$DEBIAN_LOG" "scripts/debian.sh"
DEBIAN_PID=""
if [ "$QUICK" = 1 ]; then
    say "pytest, quick tier (unit tests and the integration tests marked quick)"
    "${PYTEST[@]}" "${DURATIONS[@]}" -m "(not integration or quick) and not soak" "$@"
    say "pytest tests/connect, quick tier"
    "$VENV/bin/pytest" -p no:cacheprovider --durations=5 -m quick tests/connect
elif [ "$SOAK" = 1 ]; then
    say "pytest, soak tier (the tests marked soak, ${SPARK_CKPT_TEST_WORKERS:-2} processes)"
    "${PYTEST[@]}" "${DURATIONS[@]}" -m soak "$@"
elif [ $# -gt 0 ]; then
    # With arguments (a test file, -k ...) only those run.
    say "pytest $*"
    "${PYTEST[@]}" "${DURATIONS[@]}" "$@"
else
    # The soak tier's scenarios are left out (bench/soak.sh runs them): each repeats, for minutes,
    # a path a test here already kills or runs (docs/development.md, "The soak tier").
    # The Connect tests (tests/connect) are one test of this run
    # (tests/integration/test_connect_process.py), which starts them in a pytest process of their
    # own: a Connect server and a classic session cannot share a process. Run alone after this
    # run, they kept one core of two busy for their 163 s.
    say "pytest (integration, unit and Connect, ${SPARK_CKPT_TEST_WORKERS:-2} processes, soak tier left out)"
    "${PYTEST[@]}" "${DURATIONS[@]}" -m "not soak"
fi
if [ "$SOAK" = 1 ]; then say "the soak tier passed"; else say "the test command passed"; fi
