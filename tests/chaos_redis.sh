#!/usr/bin/env bash
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
#   KVL_REDIS_CLUSTER and KVL_TEST_STORE_URI). RUNS defaults to 50.
# Exits with test_chaos's status; 77 (skipped) without a cluster.
set -u
chaos=${1:?usage: chaos_redis.sh TEST_CHAOS [RUNS]}
runs=${2:-50}
if [ -z "${KVL_REDIS_CLUSTER:-}" ] || [ -z "${KVL_TEST_STORE_URI:-}" ]; then
	echo "skipped: no cluster (run me through tests/redis/run.sh cluster)"
	exit 77
fi

# Short timeouts: a paused node costs a call at most this long.
uri="$KVL_TEST_STORE_URI?timeout_ms=300&connect_timeout_ms=200"
KVL_CHAOS_RUNS=$runs KVL_CHAOS_STORE=$uri KVL_CHAOS_LIMIT_S=${KVL_CHAOS_LIMIT_S:-120} \
	"$chaos" &
pid=$!

# The disturber: every 0.3-1.2 s, one random server is killed and restarted,
# or paused and resumed, while the campaign runs.
ports=($KVL_REDIS_CLUSTER)
kills=0 pauses=0
while kill -0 "$pid" 2>/dev/null; do
	sleep "0.$((3 + RANDOM % 9))"
	port=${ports[$((RANDOM % ${#ports[@]}))]}
	if [ $((RANDOM % 2)) -eq 0 ]; then
		bash "$KVL_REDIS_SERVERS" kill "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
		sleep "0.$((2 + RANDOM % 6))"
		bash "$KVL_REDIS_SERVERS" restart "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
		kills=$((kills + 1))
	else
		bash "$KVL_REDIS_SERVERS" pause "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
		sleep "0.$((1 + RANDOM % 5))"
		bash "$KVL_REDIS_SERVERS" resume "$KVL_REDIS_DIR" "$port" >/dev/null 2>&1
		pauses=$((pauses + 1))
	fi
done
wait "$pid"
rc=$?
echo "chaos_redis: $kills kills and restarts, $pauses pauses of cluster servers during the campaign; exit $rc"
exit $rc
