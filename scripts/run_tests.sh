#!/usr/bin/env bash
# README command 2: install what the tests need (Python packages, MathJax, system packages such as
# Chromium), then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/install_test_deps.sh
.venv/bin/python -m pytest tests "$@"
