#!/usr/bin/env bash
# Installs what the tests need beyond Rust crates: Debian's Chromium, which renders the
# `kerf simulate --report` page in crates/kerf/tests/simulate.rs.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
