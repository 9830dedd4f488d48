#!/usr/bin/env bash
# Install the system packages tlogd needs to build and test on Debian/Ubuntu.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail
# `deps.sh test` adds what the test suite needs: mariadb-server and postgresql, from
# which the SQL backends' tests start private servers of their own (never the system
# ones), openssl, which makes the certificates of the TLS tests, fuse3 (fusermount3)
# for crates/faultfs's fault-injecting FUSE filesystem, and MinIO and
# Toxiproxy for the object-store tests, TesseraCT's CT hammer and ctclient for the CT
# tests (built from source with `go install` at pinned
# versions into ~/.cache/tlogd-tools/bin, outside the clone, once per machine).
pkgs=(libclang-dev clang)
[ "${1:-}" = test ] && pkgs+=(mariadb-server postgresql openssl e2fsprogs mount fuse3 systemd chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust from rustup.rs" >&2; exit 1; }

if [ "${1:-}" = test ]; then
  # MinIO's last source state (its release tags are not served by the Go module proxy;
  # this commit is RELEASE.2025-10-15T17-29-55Z plus fixes, among them conditional
  # PUTs under concurrency). Toxiproxy's command is `cmd/server`, renamed.
  minio_version=v0.0.0-20260212201848-7aac2a2c5b7c
  toxiproxy_version=v2.12.0
  tools="${TLOGD_TOOLS_DIR:-$HOME/.cache/tlogd-tools/bin}"
  mkdir -p "$tools"
  go_install() { # name package version
    local name=$1 pkg=$2 version=$3
    [ -x "$tools/$name" ] && [ "$(cat "$tools/$name.version" 2>/dev/null)" = "$version" ] && return
    local go; go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || { echo "Go >= 1.24 is needed to build $name for the tests (go install $pkg@$version): install it from go.dev/dl" >&2; exit 1; }
    echo "building $name $version with go install (MinIO: ~15 minutes on 2 cores)..." >&2
    local tmp; tmp=$(mktemp -d)
    GOBIN="$tmp" GOFLAGS=-buildvcs=false "$go" install "$pkg@$version"
    mv "$tmp/$(basename "$pkg")" "$tools/$name"
    rm -rf "$tmp"
    echo "$version" > "$tools/$name.version"
  }
  go_install minio github.com/minio/minio "$minio_version"
  go_install toxiproxy-server github.com/Shopify/toxiproxy/v2/cmd/server "$toxiproxy_version"
  # Certificate Transparency interop: TesseraCT's CT hammer and Google's ctclient
  # drive the CT personality in crates/daemon/tests/ct.rs.
  go_install ct-hammer github.com/transparency-dev/tesseract/internal/hammer v0.1.1
  # TesseraCT's POSIX server writes the CT log `tlogd migrate` copies in (ct.rs).
  go_install tesseract-posix github.com/transparency-dev/tesseract/cmd/tesseract/posix v0.1.1
  go_install ctclient github.com/google/certificate-transparency-go/client/ctclient v1.4.0
  # ACME: Let's Encrypt's test CA and its mock DNS server, for [tls.acme]
  # (crates/daemon/tests/acme.rs).
  go_install pebble github.com/letsencrypt/pebble/v2/cmd/pebble v2.8.0
  go_install pebble-challtestsrv github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv v2.8.0
fi
