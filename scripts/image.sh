#!/usr/bin/env bash
# The kerf-operator OCI image, built without a Docker daemon (Debian's umoci writes the layout).
#
#   scripts/image.sh build [--binary PATH] [--out DIR]   build it; prints the archive's path
#   scripts/image.sh name                                the reference the chart's default names
#
# `build` compiles the release binary (unless --binary names one), strips its line tables, and
# puts it in one layer with the glibc libraries it links, CA certificates, and a passwd entry for
# uid 65532 (the chart's securityContext runs it as that user). Nothing else: no shell, no
# package manager. It writes DIR/layout (an OCI image layout) and DIR/kerf-operator-VERSION.oci.tar,
# an OCI archive, which `docker load -i` (Docker 25+) and `skopeo copy oci-archive:FILE
# docker://REGISTRY/kerf-operator:VERSION` take as they are. Files carry the time of the last
# commit, so the same binary gives the same layer digest.
set -euo pipefail
cd "$(dirname "$0")/.."

REPOSITORY="ghcr.io/kerf-autoscaler/kerf-operator"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
REFERENCE="$REPOSITORY:$VERSION"

die() { echo "image.sh: $*" >&2; exit 1; }

build() {
  local binary="" out="target/image"
  while [ $# -gt 0 ]; do
    case "$1" in
      --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
      --out) out="${2:?--out needs a directory}"; shift 2 ;;
      *) die "unknown option $1 (build takes --binary PATH and --out DIR)" ;;
    esac
  done
  command -v umoci >/dev/null || die "umoci not found (Debian: apt-get install umoci)"
  if [ -z "$binary" ]; then
    cargo build --release --locked -p kerf-operator >&2
    binary="target/release/kerf-operator"
  fi
  [ -x "$binary" ] || die "$binary is not an executable"
  local epoch
  epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"

  rm -rf "$out" && mkdir -p "$out"
  local rootfs="$out/rootfs"
  mkdir -p "$rootfs"/{etc/ssl/certs,home/nonroot,tmp}
  # line tables are dropped (as the Dockerfile does); symbols stay, so a backtrace names functions
  strip --strip-debug -o "$rootfs/kerf-operator" "$binary"
  chmod 0755 "$rootfs/kerf-operator"
  # the shared libraries it links, at the paths the loader looks for them
  local lib
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  [ -f /etc/ssl/certs/ca-certificates.crt ] ||
    die "/etc/ssl/certs/ca-certificates.crt not found (Debian: apt-get install ca-certificates)"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
  chown 65532:65532 "$rootfs/home/nonroot"
  chmod 1777 "$rootfs/tmp"
  find "$rootfs" -exec touch -h -d "@$epoch" {} +

  local layout="$out/layout" created
  created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
  umoci init --layout "$layout"
  umoci new --image "$layout:$VERSION"
  # umoci's bundle: its rootfs is the image's (empty) filesystem; ours replaces it
  umoci unpack --image "$layout:$VERSION" "$out/bundle" >/dev/null
  rm -rf "$out/bundle/rootfs" && mv "$rootfs" "$out/bundle/rootfs"
  umoci repack --image "$layout:$VERSION" --history.created "$created" \
    --history.created_by "scripts/image.sh build" "$out/bundle"
  umoci config --image "$layout:$VERSION" --created "$created" --history.created "$created" \
    --os linux --architecture amd64 \
    --config.entrypoint /kerf-operator --config.user 65532:65532 --config.workingdir / \
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --config.label "org.opencontainers.image.title=kerf-operator" \
    --config.label "org.opencontainers.image.version=$VERSION"
  umoci gc --layout "$layout"
  rm -rf "$out/bundle"
  # Docker names a loaded OCI image after this annotation; skopeo and containerd read ref.name
  python3 - "$layout/index.json" "$REFERENCE" <<'EOF'
import json, sys
path, reference = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {})["io.containerd.image.name"] = reference
json.dump(index, open(path, "w"))
EOF
  local archive="$out/kerf-operator-$VERSION.oci.tar"
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -C "$layout" -cf "$archive" .
  echo "$archive"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  name) echo "$REFERENCE" ;;
  *) die "usage: scripts/image.sh build [--binary PATH] [--out DIR] | name" ;;
esac
