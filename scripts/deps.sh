#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages kvlink needs to build and test, when missing.
# Needs root (or sudo) only when something is missing.
set -e
pkgs="build-essential cmake pkg-config python3 python3-pytest python3-numpy python3-prometheus-client mypy python3-venv python3-pip libssl-dev libcmocka-dev libhiredis-dev libxxhash-dev liburing-dev redis-server redis-tools openssl"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "kvlink: installing Debian packages:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $missing
