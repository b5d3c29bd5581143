#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cli_redact.sh — the kvlink tool never prints a store's password, run by
# ctest as
#   bash tests/cli_redact.sh /path/to/kvlink
#
# Checks the error lines of `kvlink stat` and `kvlink bench` for URIs that
# fail to parse or to connect (redis:// and rediss://), and, with
# throwaway servers from tests/redis/run.sh (a password server, plaintext
# and TLS), the text of `kvlink stat` and the JSON of `kvlink bench --json`:
# each shows the URI as redis://:***@… or redis://user:***@…, never the
# password. Exits 0 on success, 1 on failure (listing each failed check);
# the server part is skipped (said so) without redis-server.
set -u

KVL=${1:?usage: cli_redact.sh /path/to/kvlink}
here=$(cd "$(dirname "$0")" && pwd)
SECRET=s3cr3t-Pa55
FAILS=0
CHECKS=0

fail() {
	echo "FAIL: $*"
	FAILS=$((FAILS + 1))
}

# check WHAT NEEDLE OUTPUT: OUTPUT holds NEEDLE and not the password.
check() {
	CHECKS=$((CHECKS + 1))
	case $3 in *"$SECRET"*) fail "$1 shows the password: $3"; return ;; esac
	case $3 in *"$2"*) ;; *) fail "$1 does not say '$2': $3" ;; esac
}

# --- error lines, no server needed
out=$("$KVL" stat --store "redis://:$SECRET@127.0.0.1:1?ttl" 2>&1)
check "stat, parse error" "redis://:***@127.0.0.1:1?ttl" "$out"
out=$("$KVL" stat --store "redis://admin:$SECRET@127.0.0.1:1?connect_timeout_ms=200" 2>&1)
check "stat, unreachable" "store 'redis://admin:***@127.0.0.1:1" "$out"
out=$("$KVL" bench --store "redis://admin:$SECRET@127.0.0.1:1?connect_timeout_ms=200" --json 2>&1)
check "bench, unreachable" "store 'redis://admin:***@127.0.0.1:1" "$out"
out=$("$KVL" stat --store "rediss://admin:$SECRET@127.0.0.1:1?tls_ca=/nonexistent/ca.pem" 2>&1)
check "stat, rediss:// bad file" "rediss://admin:***@127.0.0.1:1" "$out"
out=$("$KVL" stat --store "redis://:$SECRET@127.0.0.1:1?x=1&x=2" --format json 2>&1)
check "stat json, parse error" ":***@" "$out"

# --- with servers: the text and JSON of a store that opens
if command -v redis-server >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1; then
	out=$(bash "$here/redis/run.sh" tls bash -c '
		set -u
		K=$1 S=$2
		p=$(bash "$KVL_REDIS_SERVERS" standalone "$KVL_REDIS_DIR" --requirepass "$S") || exit 1
		t=$(bash "$KVL_REDIS_SERVERS" tls-standalone "$KVL_REDIS_DIR" --requirepass "$S") || exit 1
		echo "PLAIN=$p TLS=$t"
		echo "--- stat"
		"$K" stat --store "redis://:$S@127.0.0.1:$p" --format text 2>&1
		echo "--- stat-tls"
		"$K" stat --store "rediss://default:$S@127.0.0.1:$t?tls_ca=$KVL_REDIS_TLS/ca.crt" --format text 2>&1
		echo "--- bench"
		"$K" bench --store "redis://default:$S@127.0.0.1:$p" --json --layers 2 \
			--conversations 1 --turns 2 --system-tokens 32 --turn-tokens 32 \
			--slots 64 --compute-us 0 2>&1
		echo "--- end"
	' _ "$KVL" "$SECRET" 2>&1)
	section() { printf '%s\n' "$out" | sed -n "/^--- $1\$/,/^--- /p"; }
	check "stat text" "store redis://:***@127.0.0.1:" "$(section stat)"
	check "stat text" "objects" "$(section stat)"
	check "stat text, per process" "count this process's calls only" "$(section stat)"
	check "stat text over TLS" "store rediss://default:***@127.0.0.1:" "$(section stat-tls)"
	bench=$(section bench | grep '^{')
	check "bench --json" '"store":"redis://default:***@127.0.0.1:' "$bench"
	if command -v python3 >/dev/null 2>&1; then
		CHECKS=$((CHECKS + 1))
		printf '%s' "$bench" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["verified"] is True' ||
			fail "bench --json is not valid JSON or not verified: $bench"
	fi
else
	echo "(skipped the server checks: redis-server or openssl is not installed)"
fi

if [ $FAILS -gt 0 ]; then
	echo "$FAILS of $CHECKS checks failed"
	exit 1
fi
echo "ok: $CHECKS checks"
