#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# chaos_redis.sh — the fault campaign (tests/test_chaos.c) against a Redis
# Cluster whose servers are killed, restarted, paused and resumed while it
# runs: on top of the fault store's injected errors, bit flips, evictions
# and latency, the cluster loses masters (replicas take over), connections
# break mid-pipeline and nodes stop answering for a while. The campaign's
# invariants must hold throughout: no hang, every request completes exactly
# once, no byte reported valid is wrong, no leak (ASan build).
#
# usage: bash tests/redis/run.sh cluster bash tests/chaos_redis.sh TEST_CHAOS [RUNS]
#   (run.sh starts the cluster and exports KVL_REDIS_DIR, KVL_REDIS_SERVERS,
#   KVL_REDIS_CLUSTER and KVL_TEST_STORE_URI). RUNS defaults to 50. Also
#   under run.sh tls-cluster (KVL_REDIS_TLS_CLUSTER, a rediss:// URI), and
#   with KVL_CHAOS_SECRET=1 every object is keyed with a store secret.
# Exits with test_chaos's status; 1 when fewer servers were killed or paused
# during the campaign than the minimum (below); 77 (skipped) without a
# cluster.
set -u
chaos=${1:?usage: chaos_redis.sh TEST_CHAOS [RUNS]}
runs=${2:-50}
# The cluster: run.sh's plaintext one, or its TLS one (run.sh tls-cluster).
cluster=${KVL_REDIS_CLUSTER:-${KVL_REDIS_TLS_CLUSTER:-}}
if [ -z "$cluster" ] || [ -z "${KVL_TEST_STORE_URI:-}" ]; then
	echo "skipped: no cluster (run me through tests/redis/run.sh cluster)"
	exit 77
fi

# Short timeouts: a paused node costs a call at most this long.
case $KVL_TEST_STORE_URI in *\?*) sep='&' ;; *) sep='?' ;; esac
uri="$KVL_TEST_STORE_URI${sep}timeout_ms=300&connect_timeout_ms=200"
# KVL_CHAOS_SECRET=1: every object keyed with a store secret (secret_file).
if [ "${KVL_CHAOS_SECRET:-0}" = 1 ]; then
	head -c 32 /dev/urandom >"$KVL_REDIS_DIR/chaos.secret"
	uri="$uri&secret_file=$KVL_REDIS_DIR/chaos.secret"
fi

# The campaign must really run under disturbance: at least this many kills
# (and restarts) and pauses of a live server while it runs, and at least
# half of each round's runs not skipped as unreachable (test_chaos checks
# KVL_CHAOS_MIN_RUNS). A round that ends before the minimum is reached is
# followed by another one with the next seeds, up to max_rounds; then the
# test fails, printing the counts.
min_kills=${KVL_CHAOS_MIN_KILLS:-2}
min_pauses=${KVL_CHAOS_MIN_PAUSES:-2}
max_rounds=${KVL_CHAOS_MAX_ROUNDS:-4}
seed=${KVL_CHAOS_SEED:-1}

# 0 when the server on port $1 is alive (not killed, maybe paused).
alive() {
	local pid
	pid=$(cat "$KVL_REDIS_DIR/$1/pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null
}

# The disturber: every 0.1-0.5 s, one random server is killed and restarted,
# or paused and resumed, while the campaign runs (kills first while fewer
# than min_kills, then pauses while fewer than min_pauses, then at random).
ports=($cluster)
kills=0 pauses=0 rounds=0 rc=0
while [ "$rounds" -lt "$max_rounds" ]; do
	rounds=$((rounds + 1))
	KVL_CHAOS_RUNS=$runs KVL_CHAOS_SEED=$seed KVL_CHAOS_STORE=$uri \
		KVL_CHAOS_MIN_RUNS=${KVL_CHAOS_MIN_RUNS:-$(((runs + 1) / 2))} \
		KVL_CHAOS_LIMIT_S=${KVL_CHAOS_LIMIT_S:-120} "$chaos" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep "0.$((1 + RANDOM % 5))"
		kill -0 "$pid" 2>/dev/null || break
		port=${ports[$((RANDOM % ${#ports[@]}))]}
		alive "$port" || continue
		if [ "$kills" -lt "$min_kills" ]; then
			what=kill
		elif [ "$pauses" -lt "$min_pauses" ]; then
			what=pause
		elif [ $((RANDOM % 2)) -eq 0 ]; then
			what=kill
		else
			what=pause
		fi
		if [ "$what" = kill ]; then
			bash "$KVL_REDIS_SERVERS" kill "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
			alive "$port" || kills=$((kills + 1))
			sleep "0.$((1 + RANDOM % 4))"
			bash "$KVL_REDIS_SERVERS" restart "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1 ||
				echo "chaos_redis: server $port did not restart"
		else
			bash "$KVL_REDIS_SERVERS" pause "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1 &&
				pauses=$((pauses + 1))
			sleep "0.$((1 + RANDOM % 4))"
			bash "$KVL_REDIS_SERVERS" resume "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
		fi
	done
	wait "$pid"
	rc=$?
	[ "$rc" -eq 0 ] || break
	[ "$kills" -ge "$min_kills" ] && [ "$pauses" -ge "$min_pauses" ] && break
	seed=$((seed + runs))
done
echo "chaos_redis: $rounds round(s) of $runs runs; $kills kills and restarts, $pauses pauses of live cluster servers during the campaign (at least $min_kills and $min_pauses needed); test_chaos exit $rc"
if [ "$rc" -eq 0 ] && { [ "$kills" -lt "$min_kills" ] || [ "$pauses" -lt "$min_pauses" ]; }; then
	echo "chaos_redis: FAIL: too few disturbances exercised"
	exit 1
fi
exit $rc
