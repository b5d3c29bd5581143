#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_log.sh — KVL_LOG_LEVEL, run by ctest as
#   bash tests/cli_log.sh /path/to/kvlink
#
# A store opened with an option it cannot honour (mem:'s pinned=1 on a
# machine without a usable CUDA device; skipped where one is usable) logs a
# warning to standard error by default and at info, none at error or off;
# a KVL_LOG_LEVEL that is no level is itself reported. Exits 0 on success,
# 1 on failure, 77 when skipped.
set -u

KVL=${1:?usage: cli_log.sh /path/to/kvlink}
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# log LEVEL: what `kvlink stat` writes to stderr with KVL_LOG_LEVEL=LEVEL.
log() {
	KVL_LOG_LEVEL=$1 "$KVL" stat --store 'mem:?pinned=1' 2>&1 >/dev/null
}

case $("$KVL" stat --store 'mem:?pinned=1' 2>/dev/null) in
*"no effect"*) ;;
*) echo "SKIP: pinned=1 takes effect here (a usable CUDA device)"; exit 77 ;;
esac

want='kvlink: warning: [store] mem:?pinned=1: mem: pinned=1 has no effect'
for level in "" warning WARN info debug; do
	case $(log "$level") in *"$want"*) ;;
	*) fail "KVL_LOG_LEVEL='$level': no warning: $(log "$level")" ;;
	esac
done
for level in error off none; do
	out=$(log "$level")
	[ -z "$out" ] || fail "KVL_LOG_LEVEL=$level: logged: $out"
done
out=$(log loud)
case $out in *"KVL_LOG_LEVEL=loud is not a level"*"$want"*) ;;
*) fail "KVL_LOG_LEVEL=loud: not reported, or no warning after: $out" ;;
esac

[ $FAILS -eq 0 ] && echo "PASS cli_log" || echo "FAIL cli_log: $FAILS"
[ $FAILS -eq 0 ]
