#!/usr/bin/env bash
# Python tools the tests run (scripts/python-tools.txt), in a virtualenv cached under
# ~/.cache/kerf-e2e (override: KERF_E2E_CACHE) and named by the hash of the pinned list, so a
# changed pin builds a new one.
#   scripts/python-tools.sh install     create the venv and install the pinned tools (once)
#   scripts/python-tools.sh bin NAME    print the path of tool NAME in that venv
set -euo pipefail
cd "$(dirname "$0")/.."
REQUIREMENTS=scripts/python-tools.txt
HASH=$(sha256sum "$REQUIREMENTS" | cut -c1-12)
VENV="${KERF_E2E_CACHE:-$HOME/.cache/kerf-e2e}/python-tools-$HASH"

case "${1:-}" in
  install)
    if [ -f "$VENV/.installed" ]; then
      exit 0
    fi
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
      SUDO=""
      if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS"
    touch "$VENV/.installed"
    ;;
  bin)
    tool="${2:?usage: scripts/python-tools.sh bin NAME}"
    if [ ! -x "$VENV/bin/$tool" ]; then
      echo "$tool is not installed: run scripts/python-tools.sh install" >&2
      exit 1
    fi
    echo "$VENV/bin/$tool"
    ;;
  *)
    echo "usage: scripts/python-tools.sh install | bin NAME" >&2
    exit 2
    ;;
esac
