#!/usr/bin/env bash
# The main job: the spark-ckpt demo on its embedded default data.
# Sets up .venv and checks Java on first use; Spark fetches Delta's jars on first start.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
say "running the demo (a local Spark session starts first: ~20 s, longer the very first time)"
exec "$VENV/bin/python" "$ROOT/examples/demo.py" "$@"
