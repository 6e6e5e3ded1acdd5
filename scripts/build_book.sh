#!/usr/bin/env bash
# README command 1: install everything, then build the book offline into _build/html (warnings are errors).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/jupyter-book build . -W --keep-going
echo "Book built: $(pwd)/_build/html/index.html"
