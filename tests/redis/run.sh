#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh MODE CMD [ARGS…] — runs CMD with throwaway Redis servers, then stops
# them (also when CMD fails or crashes, or this script is killed).
#
#   MODE standalone: one server; cluster: 3 masters + 3 replicas; both;
#   tls: one TLS-only server; tls-cluster: 3 TLS masters; tls-both; or
#   several joined by '+' (standalone+tls: a plaintext and a TLS server).
#
# CMD sees:
#   KVL_REDIS_DIR          the servers' directory (a temp dir)
#   KVL_REDIS_SERVERS      this directory's servers.sh, to start more
#   KVL_REDIS_STANDALONE   127.0.0.1:PORT of the standalone server
#   KVL_REDIS_CLUSTER      the cluster's 6 ports, masters first
#   KVL_TEST_STORE_URI     redis:// URI of the cluster (or of the standalone
#                          server when there is no cluster); without a
#                          plaintext server, KVL_TEST_TLS_STORE_URI
#   KVL_TEST_TLS_STORE_URI (tls modes) rediss:// URI of the TLS cluster (or
#                          server) with the test certificates
#   KVL_REDIS_TLS          (tls modes) the directory of the certificates:
#                          ca.crt, server.*, client.crt/.key, other-ca.crt
#   KVL_REDIS_TLS_STANDALONE  127.0.0.1:PORT of the TLS server
#   KVL_REDIS_TLS_CLUSTER  the TLS cluster's 3 ports
# Exits with CMD's status, or 77 (skipped) without redis-server/redis-cli
# (or, in the tls modes, without the openssl command).
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: run.sh standalone|cluster|both|tls|tls-cluster|tls-both CMD [ARGS...]}
shift
[ $# -gt 0 ] || { echo "usage: run.sh MODE CMD [ARGS...]" >&2; exit 2; }
for b in redis-server redis-cli; do
	if ! command -v "$b" >/dev/null 2>&1; then
		echo "skipped: $b is not installed (Debian: apt-get install redis-server redis-tools)"
		exit 77
	fi
done

case $mode in *tls*)
	if ! command -v openssl >/dev/null 2>&1; then
		echo "skipped: the openssl command is not installed (Debian: apt-get install openssl)"
		exit 77
	fi
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvl-redis.XXXXXX") || exit 1
export KVL_REDIS_DIR=$dir KVL_REDIS_SERVERS=$here/servers.sh
. "$here/../stop_on_exit.sh"
stop_on_exit "$dir" bash "$here/servers.sh" stop "$dir"

# MODE is one of the names above or several joined by '+' (e.g.
# standalone+tls: a plaintext and a TLS server side by side).
case $mode in
both) parts="standalone cluster" ;;
tls-both) parts="tls tls-cluster" ;;
*) parts=$(printf '%s' "$mode" | tr '+' ' ') ;;
esac
plain_uri="" tls_uri=""
for part in $parts; do
	case $part in
	standalone)
		p=$(bash "$here/servers.sh" standalone "$dir") || exit 1
		export KVL_REDIS_STANDALONE=127.0.0.1:$p
		plain_uri=redis://127.0.0.1:$p
		;;
	cluster)
		ports=$(bash "$here/servers.sh" cluster "$dir") || exit 1
		export KVL_REDIS_CLUSTER="$ports"
		uri=""
		for p in $ports; do uri="$uri${uri:+,}127.0.0.1:$p"; done
		plain_uri=redis://$uri
		;;
	tls|tls-cluster)
		bash "$here/servers.sh" certs "$dir" || exit 1
		export KVL_REDIS_TLS=$dir/tls
		opts="tls_ca=$dir/tls/ca.crt&tls_cert=$dir/tls/client.crt&tls_key=$dir/tls/client.key"
		if [ "$part" = tls ]; then
			p=$(bash "$here/servers.sh" tls-standalone "$dir") || exit 1
			export KVL_REDIS_TLS_STANDALONE=127.0.0.1:$p
			tls_uri="rediss://127.0.0.1:$p?$opts"
		else
			ports=$(bash "$here/servers.sh" tls-cluster "$dir") || exit 1
			export KVL_REDIS_TLS_CLUSTER="$ports"
			uri=""
			for p in $ports; do uri="$uri${uri:+,}127.0.0.1:$p"; done
			tls_uri="rediss://$uri?$opts"
		fi
		;;
	*)
		echo "run.sh: unknown mode '$part'" >&2
		exit 2
		;;
	esac
done
[ -n "$tls_uri" ] && export KVL_TEST_TLS_STORE_URI=$tls_uri
export KVL_TEST_STORE_URI=${plain_uri:-$tls_uri}
"$@"
