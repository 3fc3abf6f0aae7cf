#!/usr/bin/env bash
# The documentation site (mkdocs.yml, pages in docs/), built strictly: a broken link or anchor,
# or a reference table the code cannot render, fails the build.
#   ./scripts/docs.sh          build into build/site (open build/site/index.html)
#   ./scripts/docs.sh serve    preview on http://127.0.0.1:8000, rebuilt on every edit
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" docs
cd "$ROOT"
# Material for MkDocs prints a notice about MkDocs 2 on every run; the build does not use it.
export NO_MKDOCS_2_WARNING=1
if [ "${1:-}" = "serve" ]; then
  exec "$VENV/bin/mkdocs" serve --strict
fi
say "docs: mkdocs build --strict into build/site"
"$VENV/bin/mkdocs" build --strict --quiet
say "docs: built build/site/index.html"
