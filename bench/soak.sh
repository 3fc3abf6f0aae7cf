#!/usr/bin/env bash
# The soak tier: the long scenarios the test command leaves out for its time budget, each
# repeating a path the test command already exercises (a second kill test of one recovery path,
# a second plugin's run of a minutes-long scenario, the cluster's executor and driver kills).
# Which tests these are: `pytest --collect-only -m soak`; why each is one: docs/development.md.
# Run it before a release and after changing recovery, a connector's decoding or the cluster
# path; about 25 minutes on two cores. Extra arguments go to pytest (-k ..., -n 1).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../scripts/test.sh" --soak "$@"
