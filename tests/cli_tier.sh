#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_tier.sh — the command-line tool over a tier: store, run by ctest as
#   bash tests/cli_tier.sh /path/to/kvlink
#
# Checks that `kvlink bench --store 'tier:…'` verifies every byte and
# reports each tier (text and JSON), with a top tier smaller than the
# working set so that pages spill down and are promoted back; that `kvlink
# replay --store 'tier:…' --load` reports block hits per tier that add up
# to the block hits, and matches a replay over one store large enough to
# evict nothing (on the shared trace, else a generated one); that --store
# refuses the capacity options; that `kvlink stat` shows the tiers in
# text, JSON and Prometheus; and that a malformed tier: URI fails with the
# reason. Exits 0 on success, 1 on failure (listing
# each failed check).
set -u

KVL=${1:?usage: cli_tier.sh /path/to/kvlink}
TRACE=${KVL_TIER_TRACE:-$(dirname "$0")/../../shared/traces/synthetic_trace.jsonl}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# check NAME PYTHON: PYTHON (an expression over `d`, the JSON in
# $TMP/NAME.out) holds.
check() {
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$TMP/$1.out" "$2" ||
		fail "$1: not $2 in $(head -c 1500 "$TMP/$1.out")"
}

# ---------------------------------------------------------------- bench
# 2 MiB pages (8 layers of 256 KiB); a 16 MiB top holds 8 of the ~100.
TIER='tier:mem:?capacity=16MiB|mem:?capacity=1GiB'
BENCH=(--layers 8 --kv-heads 8 --head-dim 128 --page-size 64
	--conversations 4 --turns 3 --compute-us 0 --no-progress)
if "$KVL" bench --store "$TIER" "${BENCH[@]}" --json >"$TMP/bench.out" \
	2>"$TMP/bench.err"; then
	check bench 'd["verified"] is True and d["failed_loads"] == 0'
	check bench 'len(d["tiers"]) == 2 and d["tiers"][0]["uri"] == "mem:?capacity=16MiB"'
	check bench 'd["tiers"][0]["spills"] > 0 and d["tiers"][1]["hits"] > 0'
	check bench 'abs(sum(t["hit_share"] for t in d["tiers"]) - 1) < 1e-3'
else
	fail "bench --json: exit $?: $(cat "$TMP/bench.err")"
fi
if "$KVL" bench --store "$TIER" "${BENCH[@]}" >"$TMP/bench.txt" \
	2>"$TMP/bench.err"; then
	grep -Eq '^  tier 1 +mem:\?capacity=1GiB: [0-9.]+ % of hits' \
		"$TMP/bench.txt" || fail "bench text: no tier 1 line: $(cat "$TMP/bench.txt")"
	grep -q 'every byte of every page reported valid' "$TMP/bench.txt" ||
		fail "bench text: not verified"
else
	fail "bench: exit $?: $(cat "$TMP/bench.err")"
fi

# --------------------------------------------------------------- replay
# The shared trace where there is one, else a generated one (same shape).
if [ ! -f "$TRACE" ]; then
	TRACE=$TMP/trace.jsonl
	python3 "$(dirname "$0")/../bench/gen_trace.py" --sessions 300 \
		--seed 5 -o "$TRACE" || fail "bench/gen_trace.py failed"
fi
if [ -s "$TRACE" ]; then
	R=(--no-progress --json "$TRACE")
	"$KVL" replay --store 'tier:mem:?capacity=256KiB|mem:?capacity=64MiB' \
		--load "${R[@]}" >"$TMP/replay.out" 2>"$TMP/replay.err" ||
		fail "replay over tier: exit $?: $(cat "$TMP/replay.err")"
	check replay 'len(d["tiers"]) == 2 and d["policy"] is None'
	check replay 'sum(t["hit_blocks"] for t in d["tiers"]) >= d["hit_blocks"] > 0'
	check replay 'all(t["hit_blocks"] > 0 for t in d["tiers"])'
	check replay 'd["tiers"][1]["promotions"] > 0 and d["tiers"][0]["spills"] > 0'
	check replay 'd["loaded_blocks"] == d["hit_blocks"]'
	"$KVL" replay --store 'mem:?capacity=66MiB' "${R[@]}" >"$TMP/one.out" \
		2>"$TMP/one.err" || fail "replay over mem: exit $?"
	python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(a["hit_blocks"] != b["hit_blocks"] or "tiers" in b)' \
		"$TMP/replay.out" "$TMP/one.out" ||
		fail "replay: a tier store and mem:, both losing nothing, disagree"
else
	fail "no trace at $TRACE"
fi
"$KVL" replay --store 'tier:mem:|mem:' --capacity 1MiB "$TRACE" \
	>/dev/null 2>"$TMP/usage.err"
[ $? -eq 2 ] && grep -q 'give its capacities and policy there' "$TMP/usage.err" ||
	fail "replay --store --capacity: $(cat "$TMP/usage.err")"

# ----------------------------------------------------------------- stat
out=$("$KVL" stat --store "$TIER" 2>&1) || fail "stat: $out"
echo "$out" | grep -Eq '^  tier 0 +mem:\?capacity=16MiB: 0 objects, 0 hits' ||
	fail "stat text: $out"
out=$("$KVL" stat --store "$TIER" --format prometheus 2>&1)
echo "$out" | grep -q '^kvlink_store_tier_info{tier="1",uri="mem:?capacity=1GiB"} 1$' ||
	fail "stat prometheus: $out"
out=$("$KVL" stat --store "$TIER" --format json 2>&1)
echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(len(d["tiers"]) != 2)' ||
	fail "stat json: $out"
out=$("$KVL" stat --store 'tier:mem:||mem:' 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q 'tier 1 is empty' ||
	fail "stat of a bad tier: URI: $out"

if [ "$FAILS" -ne 0 ]; then
	echo "$FAILS check(s) failed"
	exit 1
fi
echo "cli_tier: all checks passed"
