#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_man.sh — the man page (tools/kvlink.1) against the tool, run by ctest
# as   bash tests/cli_man.sh /path/to/kvlink
#
# Every command that `kvlink --help` lists has a section, every --option
# that `kvlink COMMAND --help` prints is described there, and the page names
# no option the tool does not take; where man(1) is installed the page
# renders without warnings. Exits 0 on success, 1 on failure.
set -u

KVL=${1:?usage: cli_man.sh /path/to/kvlink}
PAGE=$(dirname "$0")/../tools/kvlink.1
FAILS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# The options of the page's section for command $1 (roff's \- unescaped).
page_options() {
	sed -n "/^\.SS $1\$/,/^\.S[SH] /p" "$PAGE" | sed 's/\\-/-/g' |
		grep -o -- '--[a-z][a-z-]*' | sort -u
}

commands=$("$KVL" --help | awk '/^  [a-z]+ / {print $1}')
[ -n "$commands" ] || fail "kvlink --help lists no command"
for cmd in $commands; do
	grep -q "^\.SS $cmd\$" "$PAGE" || { fail "no section for $cmd"; continue; }
	tool=$("$KVL" "$cmd" --help | grep -o -- '--[a-z][a-z-]*' |
		grep -v -e '^--help$' -e '^--opt$' | sort -u)
	page=$(page_options "$cmd")
	for o in $tool; do
		printf '%s\n' "$page" | grep -qx -- "$o" ||
			fail "$cmd: $o is in --help but not in the page"
	done
	for o in $page; do
		printf '%s\n' "$tool" | grep -qx -- "$o" ||
			fail "$cmd: the page describes $o, which --help does not list"
	done
done

if command -v man >/dev/null 2>&1; then
	warn=$(MANWIDTH=80 man --warnings -l "$PAGE" 2>&1 >/dev/null)
	[ -z "$warn" ] || fail "man warns: $warn"
fi

[ $FAILS -eq 0 ] && echo "PASS cli_man" || echo "FAIL cli_man: $FAILS"
[ $FAILS -eq 0 ]
