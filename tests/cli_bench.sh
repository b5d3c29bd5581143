#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_bench.sh — tests of `kvlink bench`'s options, run by ctest as
#   bash tests/cli_bench.sh /path/to/kvlink
#
# Checks that --gpu-copy takes auto, kernel or dma and refuses anything
# else (exit 2, naming the choices); that a small run with each mode
# verifies its pages and, with --json --stats json, prints one JSON
# document whose "stats" hold the linker's loaded_dma_bytes (0 for a pool
# in host memory, whatever the mode); that options take --opt=value; that
# --json with Prometheus stats, an option without its value and an unknown
# option are usage errors. Exits 0 on success, 1 on
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
bench = json.loads(sys.stdin.read())  # one document
assert bench["verified"] is True, bench
lk = bench["stats"]["linker"]
assert lk["loaded_bytes"] > 0 and lk["loaded_dma_bytes"] == 0, lk
' || fail "--gpu-copy $mode: not one JSON document, not verified, or DMA bytes on a host pool: $out"
done

# --opt=value as well as --opt value.
out=$("$KVL" bench --gpu-copy=kernel --layers=2 --conversations=1 \
	--turns=1 --system-tokens=32 --turn-tokens=32 --slots=8 --json 2>&1) ||
	fail "--opt=value refused: $out"
printf '%s' "$out" | python3 -c 'import json,sys; json.loads(sys.stdin.read())' ||
	fail "--opt=value: not JSON: $out"
# JSON and Prometheus text together would not be one document.
"$KVL" bench --json --stats prometheus "${small[@]}" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--json --stats prometheus is not a usage error"
out=$("$KVL" bench --layers 2>&1)
[ $? -eq 2 ] && case $out in *"--layers needs a value"*) true ;; *) false ;; esac ||
	fail "--layers without a value: $out"
out=$("$KVL" bench --frobnicate 2>&1)
[ $? -eq 2 ] && case $out in *"unknown option '--frobnicate'"*) true ;; *) false ;; esac ||
	fail "--frobnicate: $out"

# A progress bar when asked for (stderr is no terminal here): every redraw
# fits COLUMNS and shows the rate and the time left; none unasked.
err=$(COLUMNS=50 "$KVL" bench --progress "${small[@]}" 2>&1 >/dev/null)
printf '%s' "$err" | python3 -c '
import sys
draws = [d.replace("\x1b[K", "") for d in sys.stdin.buffer.read().decode().split("\r")]
draws = [d for d in draws if d]
assert draws, "no progress bar"
assert all(len(d) <= 49 for d in draws), max(draws, key=len)
assert "100% 4/4 turns" in draws[-1] and "ETA" in draws[-1], draws[-1]
' || fail "--progress: $err"
err=$("$KVL" bench "${small[@]}" 2>&1 >/dev/null)
case $err in *ETA*) fail "a progress bar on a pipe unasked: $err" ;; esac

[ $FAILS -eq 0 ] && echo "PASS cli_bench" || echo "FAIL cli_bench: $FAILS"
[ $FAILS -eq 0 ]
