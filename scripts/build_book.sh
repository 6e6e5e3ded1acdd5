#!/usr/bin/env bash
# README command 1: install everything, then build the book offline into _build/html (warnings are errors), with the
# learner kit in it (the wheel and the zip its pages link to), and its Chinese edition into _build/html/zh.
# `bash scripts/build_book.sh --mathjax` only installs MathJax (the test suite's book tests build the book
# themselves). MathJax is the one thing that needs Node.js/npm, and only the book needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
install_mathjax() {
  # MathJax, vendored for offline math (see _config.yml); the same npm install brings configurable-http-proxy, the
  # proxy of the course's JupyterHub (deploy/jupyterhub/, tests/test_jupyterhub.py).
  if [ ! -f node_modules/mathjax/es5/tex-chtml.js ] || [ ! -x node_modules/.bin/configurable-http-proxy ]; then
    command -v npm >/dev/null || { echo "building the book needs Node.js/npm (for MathJax)" >&2; exit 1; }
    npm ci --no-audit --no-fund --silent
  fi
}
if [ "${1:-}" = "--mathjax" ]; then
  install_mathjax
  exit 0
fi
bash scripts/install.sh
install_mathjax
.venv/bin/jupyter-book build . -W --keep-going
# The Chinese edition (issue 45) into _build/html/zh/, from a source tree generated in _build/editions/zh/src
# (autograder/book_editions.py): the Chinese releases and the front page translated through book.po, -W too.
.venv/bin/python -m autograder.book_editions build --site _build/html --work _build/editions
echo "Book built: $(pwd)/_build/html/index.html (English) and $(pwd)/_build/html/zh/index.html (Chinese)"
echo "The course kit in each (autograder/book_site.py): attention-kit.zip and wheels/ beside its index.html"
