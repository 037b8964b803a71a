#!/usr/bin/env bash
# `eagle-fix publish` on any checkout: asv publish walks the first-parent history of the branch asv.conf.json
# names (main), and exits 128 where there is no local `main` (a pull request's or a dispatched branch's
# checkout), after the gate had passed. Here main is made a local branch from origin/main first.
#
#   scripts/publish.sh [eagle-fix publish options...]     PYTHON (default .venv/bin/python): the project's venv
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
case "${1:-}" in -h | --help) exec "$PY" -m eagle_fix.cli publish --help ;; esac  # before any branch is made
if ! git show-ref --verify --quiet refs/heads/main; then
  git show-ref --verify --quiet refs/remotes/origin/main || git fetch --quiet origin main:refs/remotes/origin/main
  git branch --quiet main origin/main
  echo "publish: local branch main made from origin/main ($(git rev-parse --short main))" >&2
fi
PATH="$(cd "$(dirname "$PY")" && pwd):$PATH" exec "$PY" -m eagle_fix.cli publish "$@"
