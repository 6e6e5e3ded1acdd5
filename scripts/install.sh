#!/usr/bin/env bash
# Install everything the book and the notebooks need into .venv (idempotent; safe to re-run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
# MathJax, vendored for offline math (see _config.yml).
if [ ! -f node_modules/mathjax/es5/tex-chtml.js ]; then
  npm ci --no-audit --no-fund --silent
fi
# A kernel named python3 that runs this venv's interpreter, for nbclient, nbgrader and nbval.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention course)" >/dev/null
