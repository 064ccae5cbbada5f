#!/usr/bin/env bash
# Installs what the tests need beyond Rust crates: Debian's Chromium (renders the
# `kerf simulate --report` page in crates/kerf/tests/simulate.rs), kubectl, script, and a real
# Kubernetes control plane built from the Go module proxy (scripts/e2e-cluster.sh; cached under
# ~/.cache/kerf-e2e, so only the first run builds: about 15 minutes on 2 cores) with helm, and the
# pinned Python tools of scripts/python-tools.txt (cfn-lint checks deploy/aws; moto plays AWS),
# umoci, skopeo and runc for the operator's image (scripts/image.sh, tests/image.rs), and mdbook
# for the book in docs/ (scripts/check-docs.py).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v kubectl >/dev/null 2>&1 || missing+=(kubectl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# `script` gives the progress-bar test a terminal
command -v script >/dev/null 2>&1 || missing+=(bsdutils)
# the image test: umoci writes and unpacks the OCI image, skopeo copies it, runc runs it
for tool in umoci skopeo runc; do command -v $tool >/dev/null 2>&1 || missing+=($tool); done
# Debian's Go is older than Kubernetes needs; e2e-cluster.sh lets it fetch the newer toolchain
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
/usr/bin/chromium --version
scripts/e2e-cluster.sh build
scripts/python-tools.sh install
# the book: mdBook from crates.io, pinned, installed once into ~/.cargo/bin
MDBOOK_VERSION=0.5.4
if ! "${CARGO_HOME:-$HOME/.cargo}/bin/mdbook" --version 2>/dev/null | grep -q "v$MDBOOK_VERSION"; then
  # without the server and search index the book does not need: a quicker build
  cargo install mdbook --locked --no-default-features --version "$MDBOOK_VERSION" --quiet
fi
