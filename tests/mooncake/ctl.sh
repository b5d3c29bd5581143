#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ctl.sh DIR start-master|stop-master|start-holder|stop-holder|stop-all
# Starts and stops the throwaway Mooncake deployment of tests/mooncake/run.sh,
# whose settings are in DIR/env (written by run.sh). Tests call it through
# $KVL_MOONCAKE_CTL to lose a master or a holder in the middle of their work.
set -u
dir=${1:?usage: ctl.sh DIR ACTION}
action=${2:?usage: ctl.sh DIR ACTION}
# shellcheck source=/dev/null
. "$dir/env"

# Waits until TCP port $1 on 127.0.0.1 accepts connections (20 s at most).
wait_port() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

stop() { # stop NAME: SIGKILL, as a crash would
	if [ -f "$dir/$1.pid" ]; then
		kill -9 "$(cat "$dir/$1.pid")" 2>/dev/null
		rm -f "$dir/$1.pid"
	fi
}

case $action in
start-master)
	"$MASTER" --rpc_address=127.0.0.1 --rpc_port="$PORT" \
		--enable_metric_reporting=false --metrics_host=127.0.0.1 \
		--metrics_port="$((PORT + 1))" \
		--default_kv_lease_ttl="$LEASE_MS" \
		>>"$dir/master.log" 2>&1 &
	echo $! >"$dir/master.pid"
	wait_port "$PORT" || { echo "mooncake_master did not listen on $PORT (see $dir/master.log)" >&2; exit 1; }
	;;
start-holder)
	: >"$dir/holder.out"
	"$HOLDER" "mooncake://127.0.0.1:$PORT?lib=$LIB&segment=$SEGMENT&staging=4MiB" \
		>"$dir/holder.out" 2>>"$dir/holder.log" &
	echo $! >"$dir/holder.pid"
	for _ in $(seq 600); do
		grep -q ready "$dir/holder.out" && exit 0
		kill -0 "$(cat "$dir/holder.pid")" 2>/dev/null || break
		sleep 0.1
	done
	echo "the holder did not start (see $dir/holder.log)" >&2
	exit 1
	;;
stop-master) stop master ;;
stop-holder) stop holder ;;
stop-all) stop holder; stop master ;;
*) echo "ctl.sh: unknown action $action" >&2; exit 2 ;;
esac
