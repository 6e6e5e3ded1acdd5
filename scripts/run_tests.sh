#!/usr/bin/env bash
# README command 2: install what the tests need (Python packages, MathJax, system packages such as
# Chromium), then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/build_book.sh --mathjax   # npm: MathJax (the book tests render math offline), configurable-http-proxy
bash scripts/install_test_deps.sh
# One pytest worker per core (at most 4). A third worker on 2 cores, to fill the time workers wait on a browser,
# a hub or a server, gained 23 s of 13 min and raised the CPU the notebooks took (test_release: 183 CPU s against
# 141 with two); measured again once test_chapters ran one nbgrader process (40251c6), three lost: 13 min 22 s
# against 12 min 32 s, fresh clones of 5313e4c. Whole files go to one worker so module fixtures (a warm engine,
# a graded class, the built book) are built once, longest file first (tests/conftest.py, FILE_SECONDS).
workers=$(nproc); [ "$workers" -gt 4 ] && workers=4
.venv/bin/python -m pytest tests -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
