#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_hash.sh — tests of `kvlink hash`, run by ctest as
#   bash tests/cli_hash.sh /path/to/kvlink
#
# Checks that tokens given as arguments and on standard input (any mix of
# spaces, commas and newlines) give the same hashes, one line per whole page,
# equal to what an independent implementation (python3 hashlib) computes;
# that long input is streamed correctly; and that every kind of bad input
# exits with status 2 and a message on stderr that quotes the bad value.
# Exits 0 on success, 1 on failure (listing each failed check), 77 (skipped)
# without python3.
set -u

KVL=${1:?usage: cli_hash.sh /path/to/kvlink}
if ! command -v python3 >/dev/null; then
	echo "skipped: python3 is needed for the reference hashes"
	exit 77
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
CHECKS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# Reference page hashes, independent of kvlink: reads tokens from stdin.
# usage: ref PAGE_SIZE [PRIOR_HEX] < tokens
REF_PY='
import hashlib, re, struct, sys
ps = int(sys.argv[1])
prev = bytes.fromhex(sys.argv[2]) if len(sys.argv) > 2 else b""
toks = [int(t) for t in re.split(r"[\s,]+", sys.stdin.read()) if t]
for i in range(len(toks) // ps):
    p = toks[i * ps:(i + 1) * ps]
    if max(p) > 0xFFFFFFFF:
        data = b"\xff" + struct.pack("<%dQ" % ps, *p)
    else:
        data = struct.pack("<%dI" % ps, *p)
    prev = hashlib.sha256(prev + data).digest()
    print(prev.hex())
'
ref() {
	python3 -c "$REF_PY" "$@"
}

# run NAME STDIN_FILE ARGS...: runs kvlink hash, leaving $TMP/NAME.out,
# $TMP/NAME.err and the exit status in RC.
run() {
	local name=$1 input=$2
	shift 2
	"$KVL" hash "$@" <"$input" >"$TMP/$name.out" 2>"$TMP/$name.err"
	RC=$?
}

# same NAME FILE_A FILE_B: the two files are equal.
same() {
	CHECKS=$((CHECKS + 1))
	if ! cmp -s "$2" "$3"; then
		fail "$1: output differs from the reference"
		diff "$2" "$3" | head -10
	fi
}

# expect_ok NAME: the last run exited 0 with nothing on stderr.
expect_ok() {
	CHECKS=$((CHECKS + 1))
	if [ "$RC" -ne 0 ] || [ -s "$TMP/$1.err" ]; then
		fail "$1: exit status $RC, stderr: $(head -c 300 "$TMP/$1.err")"
	fi
}

# expect_lines NAME N: the last run printed N lines of 64 lowercase hex.
expect_lines() {
	CHECKS=$((CHECKS + 1))
	local n bad
	n=$(wc -l <"$TMP/$1.out")
	bad=$(grep -cvE '^[0-9a-f]{64}$' "$TMP/$1.out")
	if [ "$n" -ne "$2" ] || [ "$bad" -ne 0 ]; then
		fail "$1: expected $2 hash lines, got $n lines ($bad malformed)"
	fi
}

: >"$TMP/empty"

# ------------------------------------------------ arguments and standard input

# 23 tokens (5 whole pages of 4 and 3 left over). Page 2 holds 2^32, so only
# it takes the u64 form; page 3 holds 2^32-1, which still fits u32; page 4
# holds 2^64-1.
TOKENS=(101 7 0 65535 128000 3 42 9 4294967296 5 6 7 4294967295 1 2 3
	18446744073709551615 11 12 13 20 21 22)
printf '%s ' "${TOKENS[@]}" >"$TMP/tokens.txt"
ref 4 <"$TMP/tokens.txt" >"$TMP/ref4"
CHECKS=$((CHECKS + 1))
[ "$(wc -l <"$TMP/ref4")" -eq 5 ] || fail "reference: expected 5 pages"

run args "$TMP/empty" --page-size 4 "${TOKENS[@]}"
expect_ok args
expect_lines args 5
same args "$TMP/args.out" "$TMP/ref4"

# The same tokens on stdin, separated by a mix of spaces, commas, tabs,
# CR LF and blank lines, with no newline at the end.
python3 -c '
import sys
seps = [", ", "\n", ",", "   ", "\t", "\r\n", ",\n\n", " ,"]
toks = sys.argv[1:]
sys.stdout.write("\n " + "".join(t + seps[i % len(seps)]
                 for i, t in enumerate(toks[:-1])) + toks[-1])
' "${TOKENS[@]}" >"$TMP/mixed.txt"
run stdin "$TMP/mixed.txt" --page-size 4
expect_ok stdin
expect_lines stdin 5
same stdin "$TMP/stdin.out" "$TMP/args.out"

# --page-size=N spelling and options after the tokens.
run eq_form "$TMP/empty" "${TOKENS[@]}" --page-size=4
expect_ok eq_form
same eq_form "$TMP/eq_form.out" "$TMP/ref4"

# Other page sizes: 23 pages of 1, 2 pages of 10, none of 24.
ref 1 <"$TMP/tokens.txt" >"$TMP/ref1"
run ps1 "$TMP/tokens.txt" --page-size 1
expect_ok ps1
expect_lines ps1 23
same ps1 "$TMP/ps1.out" "$TMP/ref1"

ref 10 <"$TMP/tokens.txt" >"$TMP/ref10"
run ps10 "$TMP/empty" --page-size 10 "${TOKENS[@]}"
expect_ok ps10
expect_lines ps10 2
same ps10 "$TMP/ps10.out" "$TMP/ref10"

run ps24 "$TMP/tokens.txt" --page-size 24
expect_ok ps24
expect_lines ps24 0

# A huge page size is fine: no whole page, no output.
run huge_page "$TMP/empty" --page-size 18446744073709551615 1 2 3
expect_ok huge_page
expect_lines huge_page 0

# No tokens at all on stdin.
run no_tokens "$TMP/empty" --page-size 4
expect_ok no_tokens
expect_lines no_tokens 0
printf ' ,\n,, \n' >"$TMP/seps_only.txt"
run seps_only "$TMP/seps_only.txt" --page-size 4
expect_ok seps_only
expect_lines seps_only 0

# ---------------------------------------------------------------------- prior

PRIOR=$(python3 -c 'import hashlib; print(hashlib.sha256(b"tenant-a").hexdigest())')
ref 4 "$PRIOR" <"$TMP/tokens.txt" >"$TMP/ref4p"
run prior "$TMP/empty" --page-size 4 --prior "$PRIOR" "${TOKENS[@]}"
expect_ok prior
expect_lines prior 5
same prior "$TMP/prior.out" "$TMP/ref4p"
CHECKS=$((CHECKS + 1))
cmp -s "$TMP/prior.out" "$TMP/ref4" && fail "prior: --prior changed nothing"

# Upper-case hex and the --prior=HEX spelling, tokens on stdin.
PRIOR_UC=$(printf '%s' "$PRIOR" | tr a-f A-F)
run prior_uc "$TMP/mixed.txt" --prior="$PRIOR_UC" --page-size 4
expect_ok prior_uc
same prior_uc "$TMP/prior_uc.out" "$TMP/ref4p"

# ------------------------------------------------------------ streamed input

# 100003 random tokens (1 in 1000 above 2^32-1), one to three per line: far
# more than one internal batch, and page sizes that do not divide it.
python3 -c '
import random
r = random.Random(12345)
out = []
for i in range(100003):
    t = r.randrange(2**64) if r.random() < 0.001 else r.randrange(200000)
    out.append(str(t) + ("\n" if i % 3 == 2 else ","))
print("".join(out))
' >"$TMP/big.txt"
for ps in 7 16384 20000; do
	ref "$ps" <"$TMP/big.txt" >"$TMP/refbig$ps"
	run big$ps "$TMP/big.txt" --page-size "$ps"
	expect_ok big$ps
	expect_lines big$ps $((100003 / ps))
	same big$ps "$TMP/big$ps.out" "$TMP/refbig$ps"
done

# ----------------------------------------------------------------------- help

run help "$TMP/empty" --help
CHECKS=$((CHECKS + 1))
if [ "$RC" -ne 0 ] || ! grep -q 'usage: kvlink hash' "$TMP/help.out"; then
	fail "help: exit status $RC, stdout: $(head -c 200 "$TMP/help.out")"
fi

# --------------------------------------------------------------------- errors

# bad NAME STDIN_TEXT 'NEEDLE|NEEDLE…' ARGS...: kvlink hash exits 2, prints no
# hash, and says on stderr each of the |-separated NEEDLEs (fixed strings).
bad() {
	local name=$1 text=$2 needles=$3 needle
	shift 3
	printf '%b' "$text" >"$TMP/$name.in"
	run "$name" "$TMP/$name.in" "$@"
	CHECKS=$((CHECKS + 1))
	if [ "$RC" -ne 2 ]; then
		fail "$name: exit status $RC, expected 2 (args: $*)"
	fi
	if [ -s "$TMP/$name.out" ]; then
		fail "$name: printed to stdout: $(head -c 200 "$TMP/$name.out")"
	fi
	IFS='|' read -ra list <<<"$needles"
	for needle in "${list[@]}"; do
		if ! grep -qF -- "$needle" "$TMP/$name.err"; then
			fail "$name: stderr does not mention '$needle':" \
			     "$(head -c 300 "$TMP/$name.err")"
		fi
	done
}

HEX63=${PRIOR:0:63}
HEXG=${PRIOR:0:40}g${PRIOR:41}

bad no_page_size '' '--page-size' 1 2 3
bad no_page_size_stdin '1 2 3' '--page-size'
bad page_size_zero '' "'0'" --page-size 0 1 2
bad page_size_text '' "'abc'" --page-size abc 1 2
bad page_size_suffix '' "'4k'" --page-size 4k 1 2
bad page_size_negative '' "'-4'" --page-size -4 1 2
bad page_size_empty '' "''|--page-size" --page-size= 1 2
bad page_size_too_big '' "'18446744073709551616'" \
	--page-size 18446744073709551616 1 2
bad page_size_missing_value '' '--page-size' --page-size
bad negative_token '' "'-5'|token 2" --page-size 2 1 -5 3
bad text_token '' "'12x'|token 3" --page-size 2 1 2 12x 4
bad empty_token '' "''|token 2" --page-size 2 1 '' 3
bad abc_token '' "'abc'|token 1" --page-size 2 abc 1
bad float_token '' "'1.5'|token 2" --page-size 2 1 1.5
bad plus_token '' "'+7'|token 1" --page-size 2 +7 1
bad token_2_64 '' "'18446744073709551616'|token 4" \
	--page-size 2 1 2 3 18446744073709551616
bad token_huge '' "'99999999999999999999999'|token 1" \
	--page-size 2 99999999999999999999999
bad prior_63 '' "'$HEX63'|64" --page-size 2 --prior "$HEX63" 1 2
bad prior_65 '' "'${PRIOR}0'|64" --page-size 2 --prior "${PRIOR}0" 1 2
bad prior_nonhex '' "'$HEXG'|character 41" --page-size 2 --prior "$HEXG" 1 2
bad prior_missing_value '' '--prior' --page-size 2 1 2 --prior
bad unknown_option '' "'--frobnicate'" --page-size 2 --frobnicate 1 2
bad unknown_short '' "'-x'" --page-size 2 -x 1 2

# The same kinds of bad token on standard input name the token and its line.
bad stdin_text '1 2\n3 12x' "'12x'|token 4|line 2" --page-size 8
bad stdin_negative '1,-7' "'-7'|token 2|line 1" --page-size 8
bad stdin_too_big '\n\n18446744073709551616' \
	"'18446744073709551616'|token 1|line 3" --page-size 8
bad stdin_word 'one two' "'one'|token 1" --page-size 8

# On stdin, the pages before a bad token are printed, then it stops.
printf '1 2 3 4 5 oops 7 8' >"$TMP/late.txt"
run late "$TMP/late.txt" --page-size 2
printf '1 2 3 4' | ref 2 >"$TMP/ref_late"
CHECKS=$((CHECKS + 1))
if [ "$RC" -ne 2 ] || ! grep -qF "'oops'" "$TMP/late.err"; then
	fail "late: exit status $RC, stderr: $(head -c 300 "$TMP/late.err")"
fi
same late "$TMP/late.out" "$TMP/ref_late"

if [ "$FAILS" -ne 0 ]; then
	echo "cli_hash: $FAILS failures in $CHECKS checks"
	exit 1
fi
echo "cli_hash: all $CHECKS checks passed"
exit 0
