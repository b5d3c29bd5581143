#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_stat.sh — tests of `kvlink stat`, run by ctest as
#   bash tests/cli_stat.sh /path/to/kvlink
#
# Checks that a count the store cannot tell (a remote store with a node
# down; the fault store's fault.stats_unknown=1 here) prints as "unknown"
# in text, null in JSON and NaN in Prometheus text, never as
# 18446744073709551615; that known counts print as numbers; and that an
# option the store could not honour (mem:'s pinned=1 without a usable CUDA
# device) is shown as a note. Exits 0 on success, 1 on failure.
set -u

KVL=${1:?usage: cli_stat.sh /path/to/kvlink}
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# expect FORMAT URI PATTERN...: every grep -E pattern is in the output.
expect() {
	local fmt=$1 uri=$2 out
	shift 2
	if ! out=$("$KVL" stat --store "$uri" --format "$fmt" 2>&1); then
		fail "kvlink stat --store '$uri' --format $fmt failed: $out"
		return
	fi
	case $out in *18446744073709551615*)
		fail "$fmt: prints UINT64_MAX as a number: $out" ;;
	esac
	for pat in "$@"; do
		echo "$out" | grep -Eq -- "$pat" ||
			fail "$fmt '$uri': no /$pat/ in: $out"
	done
}

U='fault+mem:?fault.stats_unknown=1'
expect text "$U" '^  objects +unknown$' '^  bytes +unknown$' \
	'^  capacity +8589934592$' '^  hits +0$'
expect json "$U" '"objects":null' '"bytes":null' '"capacity":8589934592'
expect prometheus "$U" '^kvlink_store_objects NaN$' \
	'^kvlink_store_bytes NaN$' '^kvlink_store_capacity 8589934592$'
expect text mem: '^  objects +0$'

# pinned=1 has nothing to pin without a usable CUDA device.
if "$KVL" stat --store 'mem:?pinned=1' --format text | grep -q '^  note '; then
	expect text 'mem:?pinned=1' '^  note +mem: pinned=1 has no effect'
	expect json 'mem:?pinned=1' '"note":"mem: pinned=1 has no effect'
else
	expect text 'mem:?pinned=0&prealloc=1&capacity=1MiB' \
		'^  note +mem: prealloc=1 has no effect'
fi
if "$KVL" stat --store mem: --format text | grep -q note; then
	fail "a store opened with its defaults shows a note"
fi

# KVL_STORE is the default store; --store wins over it.
out=$(KVL_STORE='mem:?capacity=2MiB' "$KVL" stat --format json 2>&1)
printf '%s' "$out" | python3 -c 'import json,sys; assert json.loads(sys.stdin.read())["capacity"] == 2 << 20' ||
	fail "KVL_STORE is not the default store: $out"
out=$(KVL_STORE='mem:?capacity=2MiB' "$KVL" stat --store 'mem:?capacity=3MiB' --format json 2>&1)
printf '%s' "$out" | python3 -c 'import json,sys; assert json.loads(sys.stdin.read())["capacity"] == 3 << 20' ||
	fail "--store does not win over KVL_STORE: $out"

# --opt=value as well as --opt value; bad options are usage errors.
out=$("$KVL" stat --store=mem:?capacity=1MiB --format=json 2>&1)
printf '%s' "$out" | python3 -c 'import json,sys; assert json.loads(sys.stdin.read())["capacity"] == 1 << 20' ||
	fail "stat --store=… --format=json: $out"
for args in "--format" "--frobnicate" "extra"; do
	"$KVL" stat $args >/dev/null 2>&1
	[ $? -eq 2 ] || fail "stat $args is not a usage error"
done

if [ "$FAILS" -ne 0 ]; then
	echo "$FAILS check(s) failed"
	exit 1
fi
echo "all checks passed"
