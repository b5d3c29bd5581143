#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh CMD [ARGS…] — runs CMD against a throwaway Mooncake Store on
# loopback: one mooncake_master and one client that holds the pool's memory
# (tests/mooncake/holder.c), stopped when CMD ends (also when it fails or
# this script is killed). Mooncake is not part of kvlink: build it apart
# (docs/mooncake.md) and say where it is:
#   KVL_MOONCAKE_LIB      libmooncake_store.so, or kvlink's library with the
#                         shim (default: the one ctest built, if any)
#   KVL_MOONCAKE_MASTER   mooncake_master (default: the one on PATH)
#   KVL_MOONCAKE_HOLDER   the holder program (ctest passes its own)
#   KVL_MOONCAKE_SEGMENT  memory the holder gives the pool (default 256MiB)
#   KVL_MOONCAKE_STAGING  kvlink's staging in the tests' URI (default 64MiB)
#   KVL_MOONCAKE_LEASE_MS the master's read lease (default 200 ms: removes
#                         wait for readers' leases)
#   KVL_MOONCAKE_API      the URI's api= (ranges: kvlink's shim; whole:
#                         Mooncake's C API alone; default auto)
# Exits 77 (skipped) when the library or the master is missing, or when
# api=ranges is asked of a library without kvlink's shim.
#
# Some of Mooncake's listeners bind every interface whatever the flags, so
# where `unshare -n` is allowed (root) everything runs in a network
# namespace that has only loopback; elsewhere on the host's loopback, with
# MC_TCP_BIND_ADDRESS=127.0.0.1.
#
# CMD sees KVL_TEST_STORE_URI (a mooncake:// URI of the master, with no
# memory of its own: objects live in the holder) and KVL_MOONCAKE_CTL (a
# command: $KVL_MOONCAKE_CTL stop-holder, start-holder, stop-master,
# start-master; see ctl.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || { echo "usage: run.sh CMD [ARGS...]" >&2; exit 2; }
lib=${KVL_MOONCAKE_LIB:-${KVL_MOONCAKE_BUILT:-}}
master=${KVL_MOONCAKE_MASTER:-$(command -v mooncake_master 2>/dev/null)}
holder=${KVL_MOONCAKE_HOLDER:-}
if [ -z "$lib" ] || [ ! -f "$lib" ] || [ -z "$master" ] || [ ! -x "$master" ] ||
   [ -z "$holder" ] || [ ! -x "$holder" ]; then
	echo "skipped: no Mooncake Store here (set KVL_MOONCAKE_LIB to libmooncake_store.so and KVL_MOONCAKE_MASTER to mooncake_master; see docs/mooncake.md)"
	exit 77
fi

api=${KVL_MOONCAKE_API:-auto}
if [ "$api" = ranges ] && ! nm -D --defined-only "$lib" 2>/dev/null | grep -q ' kvl_mc_shim_version$'; then
	echo "skipped: $lib has no kvlink shim for api=ranges (build it: docs/mooncake.md)"
	exit 77
fi

if [ -z "${KVL_MOONCAKE_NETNS:-}" ] && unshare -n true 2>/dev/null; then
	export KVL_MOONCAKE_NETNS=1
	exec unshare -n bash "$0" "$@"
fi
if [ -n "${KVL_MOONCAKE_NETNS:-}" ]; then
	ip link set lo up 2>/dev/null || { echo "run.sh: cannot bring up lo in the namespace" >&2; exit 1; }
	port=50051
else
	port=$((20000 + $$ % 20000))
fi
export MC_TCP_BIND_ADDRESS=127.0.0.1

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvl-mooncake.XXXXXX") || exit 1
cat >"$dir/env" <<ENV
MASTER='$master'
HOLDER='$holder'
LIB='$lib'
PORT=$port
SEGMENT=${KVL_MOONCAKE_SEGMENT:-256MiB}
LEASE_MS=${KVL_MOONCAKE_LEASE_MS:-200}
ENV
. "$here/../stop_on_exit.sh"
stop_on_exit "$dir" bash "$here/ctl.sh" "$dir" stop-all

bash "$here/ctl.sh" "$dir" start-master || exit 1
bash "$here/ctl.sh" "$dir" start-holder || exit 1
export KVL_MOONCAKE_CTL="bash $here/ctl.sh $dir" KVL_MOONCAKE_LIB="$lib"
export KVL_TEST_STORE_URI="mooncake://127.0.0.1:$port?lib=$lib&staging=${KVL_MOONCAKE_STAGING:-64MiB}&api=$api"
"$@"
