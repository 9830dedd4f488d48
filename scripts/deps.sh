#!/usr/bin/env bash
# Install the system packages tlogd needs to build and test on Debian/Ubuntu.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail
# `deps.sh test` adds what the test suite needs: mariadb-server and postgresql, from
# which the SQL backends' tests start private servers of their own (never the system
# ones), and openssl, which makes the certificates of the TLS tests.
pkgs=(libclang-dev clang)
[ "${1:-}" = test ] && pkgs+=(mariadb-server postgresql openssl e2fsprogs mount)
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
