#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# symbols.sh LIB HEADER — the shared library exports exactly the functions
# that HEADER declares with KVL_API: no internal kvl__ symbol, nothing
# else, and none missing. Exits 77 (skipped) without nm.
lib=$1
hdr=$2
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' |
	sort -u >"$tmp/exported"
# A declaration may span lines; its name is the identifier before '('.
grep -v '^#' "$hdr" | tr '\n' ' ' | grep -o 'KVL_API [^;(]*(' |
	sed 's/($//; s/.*[ *]//' | sort -u >"$tmp/declared"
n_exp=$(wc -l <"$tmp/exported")
n_dec=$(wc -l <"$tmp/declared")
if [ "$n_dec" -lt 50 ]; then
	echo "FAIL: only $n_dec KVL_API functions found in $hdr"
	exit 1
fi
if ! cmp -s "$tmp/exported" "$tmp/declared"; then
	echo "FAIL: exported symbols of $lib differ from the KVL_API functions of $hdr"
	echo "(< exported only, > declared only)"
	diff "$tmp/exported" "$tmp/declared" | grep '^[<>]'
	exit 1
fi
# Its soname says the ABI: libkvlink.so.0.MINOR before 1.0 (a minor version
# may change it), libkvlink.so.MAJOR from 1.0 on.
major=$(sed -n 's/^#define KVL_VERSION_MAJOR //p' "$hdr")
minor=$(sed -n 's/^#define KVL_VERSION_MINOR //p' "$hdr")
want=libkvlink.so.$major
[ "$major" = 0 ] && want=libkvlink.so.0.$minor
if command -v objdump >/dev/null 2>&1; then
	soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
	if [ "$soname" != "$want" ]; then
		echo "FAIL: $lib has soname '$soname', not $want"
		exit 1
	fi
fi
echo "ok: $n_exp exported symbols, each a KVL_API function of kvlink.h; soname $want"
