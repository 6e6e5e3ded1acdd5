#!/usr/bin/env bash
# System packages the test suite needs that pip cannot provide (idempotent). Needs root (or sudo).
set -euo pipefail
# postgresql: tests/test_postgres.py runs a real server from /usr/lib/postgresql/*/bin (initdb, pg_ctl).
# fonts-noto-cjk: Chromium draws the Chinese edition's pages (book and feedback) with it; without a CJK font every
# Chinese character is an empty box in a screenshot.
packages=(chromium postgresql fonts-noto-cjk)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
