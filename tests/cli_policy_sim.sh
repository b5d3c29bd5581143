#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_policy_sim.sh — bench/policy_sim.py against `kvlink replay`, run by
# ctest as
#   bash tests/cli_policy_sim.sh /path/to/kvlink
#
# The simulator's lru and slru give the store's hit counts exactly (its
# --kvlink check), whole blocks and --partial-blocks, on a generated
# conversation trace and, where it is readable, the shared trace; so the
# published policies it replays beside them see the same accesses. Its
# table carries every policy and the default's margin; a bad policy name
# is refused. Exits 0 on success, 1 on failure, 77 without python3.
set -u

KVL=${1:?usage: cli_policy_sim.sh /path/to/kvlink}
BENCH=$(dirname "$0")/../bench
SHARED=$(dirname "$0")/../../shared/traces/synthetic_trace.jsonl
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

python3 "$BENCH/gen_trace.py" --sessions 300 --active 40 --docs 30 \
	--system-prompts 20 --seed 5 -o "$TMP/conv.jsonl" || fail "gen_trace failed"
traces=("$TMP/conv.jsonl")
[ -r "$SHARED" ] && traces+=("$SHARED")

for t in "${traces[@]}"; do
	for p in "" --partial-blocks; do
		python3 "$BENCH/policy_sim.py" --kvlink "$KVL" $p \
			--policy lru,slru --sweep 200,1000,unlimited_is_not_a_cap \
			"$t" >/dev/null 2>"$TMP/err" && fail "a bad capacity was taken"
		python3 "$BENCH/policy_sim.py" --kvlink "$KVL" $p \
			--policy lru,slru --sweep 200,1000,5000 "$t" \
			>"$TMP/out" 2>"$TMP/err" ||
			fail "$t ${p:-whole blocks}: $(cat "$TMP/err")"
		[ "$(wc -l <"$TMP/out")" -eq 6 ] ||
			fail "$t ${p:-whole blocks}: expected 6 rows: $(cat "$TMP/out")"
	done
done

python3 "$BENCH/policy_sim.py" --kvlink "$KVL" --markdown --sweep 200,2000 \
	"$TMP/conv.jsonl" >"$TMP/md" 2>"$TMP/err" || fail "markdown: $(cat "$TMP/err")"
for col in lru slru arc s3fifo sieve lirs kvlink:adaptive "default's margin"; do
	grep -qF "| $col |" "$TMP/md" || fail "markdown: no column $col"
done
[ "$(grep -cE '^\| (200|2000) \|' "$TMP/md")" -eq 2 ] ||
	fail "markdown: expected rows for 200 and 2000: $(cat "$TMP/md")"

python3 "$BENCH/policy_sim.py" --policy lfu "$TMP/conv.jsonl" >/dev/null 2>"$TMP/err" &&
	fail "an unknown policy was taken"
grep -q "unknown policy 'lfu'" "$TMP/err" || fail "no message for lfu: $(cat "$TMP/err")"

[ "$FAILS" -eq 0 ] && echo "PASS: policy_sim" && exit 0
exit 1
