#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_gen_trace.sh — bench/gen_trace.py, run by ctest as
#   bash tests/cli_gen_trace.sh /path/to/kvlink
#
# The generated trace is the same for the same seed and another for
# another; `kvlink replay` reads it whole; each session's turns come in
# order, each one's input holding the last one's input and output, its
# block ids extending the last one's (a partly filled last block may
# change); system prompts are shared, a few by many sessions; bad
# arguments are usage errors. Exits 0 on success, 1 on failure, 77 without
# python3.
set -u

KVL=${1:?usage: cli_gen_trace.sh /path/to/kvlink}
GEN=$(dirname "$0")/../bench/gen_trace.py
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

small=(--sessions 120 --active 30 --docs 20 --system-prompts 15)
python3 "$GEN" "${small[@]}" --seed 3 -o "$TMP/a.jsonl" || fail "gen_trace failed"
python3 "$GEN" "${small[@]}" --seed 3 >"$TMP/b.jsonl" || fail "gen_trace to stdout failed"
python3 "$GEN" "${small[@]}" --seed 4 -o "$TMP/c.jsonl" || fail "gen_trace, seed 4, failed"
cmp -s "$TMP/a.jsonl" "$TMP/b.jsonl" || fail "one seed gave two traces"
cmp -s "$TMP/a.jsonl" "$TMP/c.jsonl" && fail "two seeds gave one trace"

out=$("$KVL" replay --json --no-progress "$TMP/a.jsonl" 2>&1) ||
	fail "kvlink replay refused the trace: $out"
lines=$(wc -l <"$TMP/a.jsonl")
printf '%s' "$out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["requests"] == int(sys.argv[1]) and d["bad_lines"] == 0, d
assert 0 < d["block_hit_ratio"] < 1, d
' "$lines" || fail "replay: not every request, or no hits: $out"

python3 - "$TMP/a.jsonl" <<'PY' || fail "the trace's structure (above)"
import collections, json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
last_ts = -1
for r in reqs:
    assert r["timestamp"] >= last_ts, "timestamps go back"
    last_ts = r["timestamp"]
    blocks = -(-r["input_length"] // 512)
    assert len(r["hash_ids"]) == blocks, r
    by[r["session_id"]].append(r)
assert len(by) == 120, len(by)
firsts = collections.Counter()
for sid, turns in by.items():
    assert [t["turn"] for t in turns] == list(range(len(turns))), sid
    firsts[turns[0]["hash_ids"][0]] += 1
    for prev, cur in zip(turns, turns[1:]):
        assert cur["input_length"] > prev["input_length"] + \
            prev["output_length"], (sid, cur["turn"])
        assert cur["hash_ids"][:len(prev["hash_ids"]) - 1] == \
            prev["hash_ids"][:-1], (sid, cur["turn"])
# Shared system prompts, with a long tail.
assert len(firsts) < 120 and firsts.most_common(1)[0][1] >= 12, firsts
PY

for bad in "--sessions 0" "--doc-share 2" "--rate 0" "--turns 0.5"; do
	python3 "$GEN" $bad >/dev/null 2>&1
	[ $? -eq 2 ] || fail "gen_trace $bad is not a usage error"
done

[ $FAILS -eq 0 ] && echo "PASS cli_gen_trace" || echo "FAIL cli_gen_trace: $FAILS"
[ $FAILS -eq 0 ]
