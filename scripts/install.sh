#!/usr/bin/env bash
# Install the course's Python environment into .venv (idempotent; safe to re-run): PyTorch (CPU), Jupyter, the
# grader's tools and the course package. Python 3.10+ only: Node.js is needed for the HTML book alone
# (scripts/build_book.sh installs MathJax with npm), never for working through the notebooks.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
# A kernel named python3 that runs this venv's interpreter, for nbclient, nbgrader and nbval.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (attention course)" >/dev/null
