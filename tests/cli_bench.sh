#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_bench.sh — tests of `kvlink bench`'s options, run by ctest as
#   bash tests/cli_bench.sh /path/to/kvlink
#
# Checks that --gpu-copy takes auto, kernel or dma and refuses anything
# else (exit 2, naming the choices), and that a small run with each mode
# verifies its pages and reports the linker's loaded_dma_bytes (0 for a
# pool in host memory, whatever the mode). Exits 0 on success, 1 on
# failure.
set -u

KVL=${1:?usage: cli_bench.sh /path/to/kvlink}
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

small=(--layers 2 --conversations 2 --turns 2 --system-tokens 64
	--turn-tokens 32 --slots 64 --compute-us 0)

for bad in fast "" DMA; do
	out=$("$KVL" bench --gpu-copy "$bad" "${small[@]}" 2>&1)
	rc=$?
	[ $rc -eq 2 ] || fail "--gpu-copy '$bad': exit $rc, expected 2"
	case $out in *"auto, kernel or dma"*) ;;
	*) fail "--gpu-copy '$bad': no list of the modes in: $out" ;;
	esac
done
out=$("$KVL" bench --gpu-copy 2>&1)
[ $? -eq 2 ] || fail "--gpu-copy without a mode is not a usage error"

for mode in auto kernel dma; do
	if ! out=$("$KVL" bench --gpu-copy "$mode" "${small[@]}" --json \
		--stats json 2>&1); then
		fail "--gpu-copy $mode failed: $out"
		continue
	fi
	printf '%s\n' "$out" | python3 -c '
import json, sys
objs = [json.loads(l) for l in sys.stdin if l.startswith("{")]
bench, stats = objs[0], objs[1]
assert bench["verified"] is True, bench
lk = stats["linker"]
assert lk["loaded_bytes"] > 0 and lk["loaded_dma_bytes"] == 0, lk
' || fail "--gpu-copy $mode: not verified, or DMA bytes on a host pool: $out"
done

[ $FAILS -eq 0 ] && echo "PASS cli_bench" || echo "FAIL cli_bench: $FAILS"
[ $FAILS -eq 0 ]
