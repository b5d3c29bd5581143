#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_replay.sh — tests of `kvlink replay` as a command, run by ctest as
#   bash tests/cli_replay.sh /path/to/kvlink
#
# Checks that every kind of malformed trace line stops the replay with exit
# status 1 and exactly "FILE:LINE: what was wrong" on stderr (line numbers
# count blank lines); that --skip-bad counts and skips them instead; that
# bad usage exits 2 with a message; that stdin, text and JSON output, byte
# capacities and the sweep work; and that --plot writes a well-formed SVG
# with axes, labels, a title and a legend. (The hit ratios themselves are
# pinned by test_replay.) Exits 0 on success, 1 on failure (listing each
# failed check).
set -u

KVL=${1:?usage: cli_replay.sh /path/to/kvlink}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
CHECKS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# run NAME ARGS...: runs kvlink replay with stdin from /dev/null, leaving
# $TMP/NAME.out, $TMP/NAME.err and the exit status in RC.
run() {
	local name=$1
	shift
	"$KVL" replay "$@" </dev/null >"$TMP/$name.out" 2>"$TMP/$name.err"
	RC=$?
}

# expect_ok NAME: the last run exited 0 with nothing on stderr.
expect_ok() {
	CHECKS=$((CHECKS + 1))
	if [ "$RC" -ne 0 ] || [ -s "$TMP/$1.err" ]; then
		fail "$1: exit status $RC, stderr: $(head -c 300 "$TMP/$1.err")"
	fi
}

# expect_fail NAME STATUS TEXT: exit status STATUS, nothing on stdout, and
# stderr is exactly the line TEXT.
expect_fail() {
	CHECKS=$((CHECKS + 1))
	local got
	got=$(cat "$TMP/$1.err")
	if [ "$RC" -ne "$2" ] || [ -s "$TMP/$1.out" ] || [ "$got" != "$3" ]; then
		fail "$1: exit status $RC (expected $2), stderr:"
		echo "    got:      $got"
		echo "    expected: $3"
	fi
}

# expect_usage NAME TEXT: exit status 2 and TEXT somewhere on stderr.
expect_usage() {
	CHECKS=$((CHECKS + 1))
	if [ "$RC" -ne 2 ] || ! grep -qF -- "$2" "$TMP/$1.err"; then
		fail "$1: exit status $RC (expected 2), stderr: $(cat "$TMP/$1.err")"
	fi
}

# contains NAME FILE TEXT
contains() {
	CHECKS=$((CHECKS + 1))
	grep -qF -- "$3" "$2" || fail "$1: '$3' not in $(basename "$2")"
}

# same_result A B: the two runs' JSON agree but for the timings.
same_result() {
	CHECKS=$((CHECKS + 1))
	python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b):
    d.pop("wall_s"); d.pop("requests_per_s"); d.pop("trace")
sys.exit(a != b)' "$TMP/$1.out" "$TMP/$2.out" || fail "$2 differs from $1"
}
GOOD='{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}'

# ---------------------------------------------------------- malformed lines

# bad NAME LINE MESSAGE: LINE as line 3 of a trace (after a good line and a
# blank one) stops the replay with FILE:3: MESSAGE.
bad() {
	local name=$1 line=$2 msg=$3
	printf '%s\n\n%s\n%s\n' "$GOOD" "$line" "$GOOD" >"$TMP/$name.jsonl"
	run "$name" "$TMP/$name.jsonl"
	expect_fail "$name" 1 "$TMP/$name.jsonl:3: $msg"
}

bad not_json 'hello' \
	"expected a JSON object ('{'), found 'h' (column 1)"
bad array_line '[1, 2]' \
	"expected a JSON object ('{'), found '[' (column 1)"
bad missing '{"timestamp": 0, "input_length": 512, "output_length": 1}' \
	'missing field "hash_ids"'
bad missing_ts '{"input_length": 0, "output_length": 1, "hash_ids": []}' \
	'missing field "timestamp"'
bad negative '{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": []}' \
	'input_length: -5 is negative (column 34)'
bad neg_id '{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [-1]}' \
	'hash_ids: -1 is negative (column 72)'
bad fraction '{"timestamp": 1.5, "input_length": 1.5, "output_length": 1, "hash_ids": []}' \
	'input_length: 1.5 is not an integer (column 36)'
bad exponent '{"timestamp": 0, "input_length": 0, "output_length": 1e3, "hash_ids": []}' \
	'output_length: 1e3 is not an integer (column 54)'
bad neg_ts '{"timestamp": -0.5, "input_length": 0, "output_length": 1, "hash_ids": []}' \
	'timestamp: -0.5 is negative (column 15)'
bad leading_zero '{"timestamp": 007, "input_length": 0, "output_length": 1, "hash_ids": []}' \
	'timestamp: 007 has a leading zero (not JSON) (column 15)'
bad too_large '{"timestamp": 0, "input_length": 18446744073709551616, "output_length": 1, "hash_ids": []}' \
	'input_length: 18446744073709551616 is too large (above 2^64-1) (column 34)'
bad string_value '{"timestamp": "0", "input_length": 0, "output_length": 1, "hash_ids": []}' \
	'timestamp: expected a number, found a string (column 15)'
bad null_value '{"timestamp": null, "input_length": 0, "output_length": 1, "hash_ids": []}' \
	'timestamp: expected a number, found true, false or null (column 15)'
bad ids_not_array '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": 3}' \
	"hash_ids: expected an array ('['), found '3' (column 69)"
bad too_short '{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}' \
	'hash_ids has 2 ids but input_length 1025 needs ceil(1025 / 512) = 3 (column 72)'
bad too_long '{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}' \
	'hash_ids has 2 ids but input_length 512 needs ceil(512 / 512) = 1 (column 71)'
bad zero_len_ids '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [7]}' \
	'hash_ids has 1 ids but input_length 0 needs ceil(0 / 512) = 0 (column 69)'
bad other_unterminated '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [], "m": [1, }' \
	"m: expected a value, found '}' (column 82)"
bad other_escape '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [], "m": "\x"}' \
	'bad escape in a string (column 80)'
bad other_word '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [], "m": tru}' \
	"m: expected a value, found 't' (column 78)"
deep=$(printf '%.0s[' $(seq 1 70))
bad other_deep "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": [], \"m\": $deep}" \
	'm: nested more than 64 deep (column 142)'
bad twice '{"timestamp": 0, "timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}' \
	'field "timestamp" appears twice (column 18)'
bad trailing '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []} x' \
	"unexpected 'x' after the object (column 73)"
bad two_objects '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}{}' \
	"unexpected '{' after the object (column 72)"
bad unterminated '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2' \
	"expected ']' or ',' in hash_ids, found the end of the line (column 77)"
bad trailing_comma '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2,]}' \
	"hash_ids: expected an integer, found ']' (column 78)"
bad no_colon '{"timestamp" 0}' \
	"expected ':' after a field name, found '0' (column 14)"
bad no_close '{"timestamp": 0' \
	"expected '}' or ',' after a field, found the end of the line (column 16)"
bad escape '{"time\u0073tamp": 0}' \
	'escapes in field names are not supported (column 7)'
bad unquoted '{timestamp: 0}' \
	"expected a field name in double quotes, found 't' (column 2)"
bad empty_object '{}' \
	'missing field "timestamp"'

# A NUL byte and a non-ASCII byte.
printf '%s\n\n{"timestamp": 0,\000 "input_length": 0}\n' "$GOOD" >"$TMP/nul.jsonl"
run nul "$TMP/nul.jsonl"
expect_fail nul 1 "$TMP/nul.jsonl:3: expected a field name in double quotes, found a NUL byte (column 17)"
printf '%s\n\n{\xc3\xa9}\n' "$GOOD" >"$TMP/utf8.jsonl"
run utf8 "$TMP/utf8.jsonl"
expect_fail utf8 1 "$TMP/utf8.jsonl:3: expected a field name in double quotes, found byte 0xc3 (column 2)"

# Accepted: any field order, no spaces, CR LF, -0, blank lines, no final
# newline, input_length 0 with no ids.
printf '%s\r\n\n  \t\n{"hash_ids":[],"output_length":0,"input_length":0,"timestamp":-0}\n{"input_length":512,"hash_ids":[ 3 ],"timestamp":1,"output_length":2}' \
	"$GOOD" >"$TMP/liberal.jsonl"
run liberal --json "$TMP/liberal.jsonl"
expect_ok liberal
contains liberal "$TMP/liberal.out" '"requests":3,'
contains liberal "$TMP/liberal.out" '"input_tokens":1512,'

# Accepted: the fields of real traces beyond the four (session ids, models,
# nested metadata, escaped strings, negative and real numbers), skipped,
# and timestamps in fractional milliseconds; the same hit ratios as
# without them.
printf '%s\n' \
	'{"session_id": "s-1", "timestamp": 10.25, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]}' \
	'{"timestamp": 1.5e3, "model": {"name": "llama\u00e9 \"8b\"", "tp": [1, -2.5, true, null]}, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2], "empty": {}, "none": []}' \
	>"$TMP/extra.jsonl"
printf '%s\n' \
	'{"timestamp": 10, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]}' \
	'{"timestamp": 1500, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]}' \
	>"$TMP/plain.jsonl"
run extra --json --no-progress "$TMP/extra.jsonl"
expect_ok extra
contains extra "$TMP/extra.out" '"requests":2,'
contains extra "$TMP/extra.out" '"hit_blocks":2,'
run plain --json --no-progress "$TMP/plain.jsonl"
same_result plain extra

# A first request without blocks.
printf '%s\n%s\n' '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}' \
	"$GOOD" >"$TMP/empty_first.jsonl"
run empty_first --json "$TMP/empty_first.jsonl"
expect_ok empty_first
contains empty_first "$TMP/empty_first.out" '"requests":2,'

# ----------------------------------------------------------------- skip-bad

printf '%s\nnope\n%s\n{"timestamp": -1}\n%s\n' "$GOOD" "$GOOD" "$GOOD" >"$TMP/skip.jsonl"
run skip --skip-bad --json "$TMP/skip.jsonl"
CHECKS=$((CHECKS + 1))
[ "$RC" -eq 0 ] || fail "skip: exit status $RC"
contains skip "$TMP/skip.out" '"requests":3,'
contains skip "$TMP/skip.out" '"bad_lines":2,'
# (GOOD fills one whole block of 512 tokens, so each later copy hits one.)
contains skip "$TMP/skip.out" '"hit_blocks":2,'
contains skip "$TMP/skip.err" "kvlink replay: skipped $TMP/skip.jsonl:2: expected a JSON object"
contains skip "$TMP/skip.err" "kvlink replay: skipped $TMP/skip.jsonl:4: timestamp: -1 is negative"

# Without --skip-bad the same file stops at line 2.
run noskip "$TMP/skip.jsonl"
expect_fail noskip 1 "$TMP/skip.jsonl:2: expected a JSON object ('{'), found 'n' (column 1)"

# Only bad lines: nothing to replay.
printf 'x\ny\n' >"$TMP/allbad.jsonl"
run allbad --skip-bad "$TMP/allbad.jsonl"
CHECKS=$((CHECKS + 1))
[ "$RC" -eq 1 ] || fail "allbad: exit status $RC"
contains allbad "$TMP/allbad.err" 'holds no requests'

# ------------------------------------------------------------ files, usage

run missing_file "$TMP/nope.jsonl"
expect_fail missing_file 1 "kvlink replay: cannot open $TMP/nope.jsonl: No such file or directory"
: >"$TMP/empty.jsonl"
run empty "$TMP/empty.jsonl"
expect_fail empty 1 "kvlink replay: $TMP/empty.jsonl holds no requests"

printf '%s\n' "$GOOD" >"$TMP/one.jsonl"
run no_trace
expect_usage no_trace 'which trace?'
run unknown_opt --bogus "$TMP/one.jsonl"
expect_usage unknown_opt "unknown option '--bogus'"
run two_traces "$TMP/one.jsonl" "$TMP/one.jsonl"
expect_usage two_traces 'one trace at a time'
run cap0 --capacity-blocks 0 "$TMP/one.jsonl"
expect_usage cap0 '--capacity-blocks needs an integer >= 1'
run capx --capacity-blocks 12x "$TMP/one.jsonl"
expect_usage capx '--capacity-blocks needs an integer >= 1'
run capbytes --capacity lots "$TMP/one.jsonl"
expect_usage capbytes "--capacity needs a byte size > 0, e.g. 64MiB (got 'lots')"
run policy --policy lfu "$TMP/one.jsonl"
expect_usage policy "--policy: unknown policy 'lfu'"
run policy_list --policy lru, "$TMP/one.jsonl"
expect_usage policy_list '--policy: a comma-separated list'
run sweep_bad --sweep 10,x "$TMP/one.jsonl"
expect_usage sweep_bad "--sweep: 'x' is not a capacity in blocks"
run sweep_zero --sweep 0 "$TMP/one.jsonl"
expect_usage sweep_zero "--sweep: '0' is not a capacity in blocks"
run sweep_cap --sweep 10 --capacity-blocks 5 "$TMP/one.jsonl"
expect_usage sweep_cap '--sweep and --capacity-blocks exclude each other'
run plot_alone --plot "$TMP/p.svg" "$TMP/one.jsonl"
expect_usage plot_alone '--plot needs --sweep'
run block_bytes --block-bytes 12 "$TMP/one.jsonl"
expect_usage block_bytes '--block-bytes needs a multiple of 8'
run help --help
CHECKS=$((CHECKS + 1))
if [ "$RC" -ne 0 ] || ! grep -q 'usage: kvlink replay' "$TMP/help.out" ||
	! grep -q 'adaptive (default), slru, lru' "$TMP/help.out"; then
	fail "help: exit status $RC, stdout: $(head -c 300 "$TMP/help.out")"
fi

# ------------------------------------------------------------------ outputs

# A repeated prefix: 1 2 3, then 1 2 3 4: 3 of 4 blocks hit.
printf '%s\n%s\n' \
	'{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 3]}' \
	'{"timestamp": 9, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 4]}' \
	>"$TMP/small.jsonl"
run text --policy lru "$TMP/small.jsonl"
expect_ok text
contains text "$TMP/text.out" "kvlink replay: $TMP/small.jsonl: 2 requests, 7 blocks of 512 tokens, 3584 input tokens"
contains text "$TMP/text.out" '  token hits     42.86 %  (1536 of 3584 input tokens)'
contains text "$TMP/text.out" '  block hits     42.86 %  (3 of 7 blocks)'
contains text "$TMP/text.out" '  policy         lru'
contains text "$TMP/text.out" '  capacity       unlimited'

# stdin, and JSON.
"$KVL" replay --json - <"$TMP/small.jsonl" >"$TMP/stdin.out" 2>"$TMP/stdin.err"
RC=$?
expect_ok stdin
contains stdin "$TMP/stdin.out" '"trace":"-","policy":"adaptive","capacity_blocks":null'
contains stdin "$TMP/stdin.out" '"hit_tokens":1536,'
contains stdin "$TMP/stdin.out" '"token_hit_ratio":0.428571,'

# A byte capacity with room for about two objects evicts.
run bytes --json --capacity 700 "$TMP/small.jsonl"
expect_ok bytes
contains bytes "$TMP/bytes.out" '"capacity_bytes":700,'
CHECKS=$((CHECKS + 1))
grep -q '"evictions":0,' "$TMP/bytes.out" && fail "bytes: no eviction at 700 bytes"

# An object larger than the byte capacity is a clear failure.
run tiny --capacity 100 "$TMP/small.jsonl"
CHECKS=$((CHECKS + 1))
[ "$RC" -eq 1 ] || fail "tiny: exit status $RC"
contains tiny "$TMP/tiny.err" 'kvlink replay: request 1: offload:'

# A sweep: one row per capacity and policy.
run sweep --sweep 1,2,unlimited --policy lru,slru "$TMP/small.jsonl"
expect_ok sweep
CHECKS=$((CHECKS + 1))
[ "$(grep -cE '^ +(1|2|unlimited) +(lru|slru) ' "$TMP/sweep.out")" -eq 6 ] ||
	fail "sweep: expected 6 rows: $(cat "$TMP/sweep.out")"

# The plot: well-formed SVG with a title, axis labels, ticks and a legend.
run plot --sweep 1,2,3,unlimited --plot "$TMP/plot.svg" "$TMP/small.jsonl"
expect_ok plot
CHECKS=$((CHECKS + 1))
if command -v python3 >/dev/null; then
	python3 -c '
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
texts = [t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild]
need = ["token hit ratio (%)", "unlimited", "adaptive (default)", "slru", "lru",
        "eviction policy"]
miss = [n for n in need if n not in texts]
assert not miss, "missing texts: %r" % miss
assert any(t.startswith("Token hit ratio vs. store capacity") for t in texts)
assert any(t.startswith("store capacity (blocks of 512 tokens") for t in texts)
assert len(d.getElementsByTagName("polyline")) == 3
' "$TMP/plot.svg" || fail "plot: the SVG lacks parts (see above)"
else
	grep -q '</svg>' "$TMP/plot.svg" || fail "plot: no </svg>"
fi
run plot_dir --sweep 1 --plot "$TMP/no/such/dir.svg" "$TMP/small.jsonl"
CHECKS=$((CHECKS + 1))
[ "$RC" -eq 1 ] || fail "plot_dir: exit status $RC"
contains plot_dir "$TMP/plot_dir.err" "kvlink replay: cannot write $TMP/no/such/dir.svg"

# --opt=value is --opt value, the trace may come first, "--" ends options.
run eq_a --json --capacity-blocks 1 --no-progress "$TMP/one.jsonl"
run eq_b "$TMP/one.jsonl" --json --capacity-blocks=1 --no-progress
same_result eq_a eq_b
run eq_c --json --capacity-blocks=1 --no-progress -- "$TMP/one.jsonl"
same_result eq_a eq_c
run noval --policy
expect_usage noval '--policy needs a value'
run unknown --frobnicate "$TMP/one.jsonl"
expect_usage unknown "unknown option '--frobnicate'"

# --progress draws a bar that fits COLUMNS (the text cut short on a narrow
# terminal), with the label, rate and ETA.
for cols in 100 40; do
	COLUMNS=$cols "$KVL" replay --progress --capacity-blocks 1 \
		"$TMP/one.jsonl" >/dev/null 2>"$TMP/bar$cols.err"
	CHECKS=$((CHECKS + 1))
	python3 -c '
import sys
cols = int(sys.argv[2])
draws = [d.replace("\x1b[K", "") for d in open(sys.argv[1], newline="").read().split("\r")]
draws = [d for d in draws if d.strip()]
assert draws and all(len(d) < cols for d in draws), draws
if cols == 100:
    assert "1/1 requests" in draws[-1] and "ETA" in draws[-1], draws[-1]
    assert "(adaptive, 1 blocks)" in draws[-1], draws[-1]
' "$TMP/bar$cols.err" $cols || fail "--progress, $cols columns: $(cat "$TMP/bar$cols.err")"
done

echo "$CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
