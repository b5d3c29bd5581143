#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# servers.sh — throwaway Redis servers for kvlink's tests, all under one
# directory, listening on 127.0.0.1 only, on free high ports.
#
#   servers.sh standalone DIR [redis-server options…]   prints its port
#   servers.sh cluster DIR                  3 masters + 3 replicas; prints
#                                           the 6 ports, masters first
#   servers.sh certs DIR                    a test CA, server and client
#                                           certificates in DIR/tls/ (and a
#                                           second CA that signed nothing)
#   servers.sh tls-standalone DIR [options…]  a TLS-only server (port 0,
#                                           tls-port P, the certs of DIR/tls/,
#                                           client certificates optional
#                                           unless --tls-auth-clients yes)
#   servers.sh tls-cluster DIR              3 TLS masters (tls-cluster yes,
#                                           tls-replication yes); prints
#                                           their 3 ports
#   servers.sh kill DIR PORT                SIGKILL one server
#   servers.sh pause DIR PORT / resume DIR PORT   SIGSTOP / SIGCONT
#   servers.sh restart DIR PORT             start it again, same options
#   servers.sh stop DIR                     stop every server of DIR
#
# Each server lives in DIR/PORT/ (its redis.conf, log, pid file, cluster
# config); nothing is persisted (no RDB, no AOF). Exits non-zero with a
# message on stderr when a server does not come up.
set -u

die() { echo "servers.sh: $*" >&2; exit 1; }

# redis-cli to the server on port $1, over TLS when it is a TLS server.
cli() {
	if [ -f "$dir/$1/tls" ]; then
		redis-cli -h 127.0.0.1 -p "$1" --tls --cacert "$dir/tls/ca.crt" \
			--cert "$dir/tls/client.crt" --key "$dir/tls/client.key" "${@:2}"
	else
		redis-cli -h 127.0.0.1 -p "$1" "${@:2}"
	fi
}

# The test PKI in DIR/tls/: ca.crt signs server.crt (127.0.0.1 and
# localhost) and client.crt; other-ca.crt signed nothing. EC keys: quick.
make_certs() {
	local t=$1/tls
	[ -f "$t/client.crt" ] && return 0
	command -v openssl >/dev/null 2>&1 || die "openssl (the command) is not installed"
	mkdir -p "$t" || return 1
	(
		cd "$t" || exit 1
		key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
		for ca in ca other-ca; do
			key $ca.key &&
			openssl req -x509 -new -key $ca.key -out $ca.crt -days 3 \
				-subj "/CN=kvlink test $ca" 2>/dev/null || exit 1
		done
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		for who in server client; do
			key $who.key &&
			openssl req -new -key $who.key -out $who.csr \
				-subj "/CN=kvlink test $who" 2>/dev/null &&
			openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key \
				-CAcreateserial -out $who.crt -days 3 \
				-extfile $who.ext 2>/dev/null || exit 1
		done
	) || die "could not make the test certificates in $t"
}

# Number of times the server of DIR/PORT logged that it is ready.
readies() {
	local n
	n=$(grep -c "Ready to accept connections" "$1/$2/log" 2>/dev/null)
	echo "${n:-0}"
}

# Waits until the server of DIR $1 on port $2, process $3, is up: it logged
# its readiness once more than $4 times (so a server of someone else that
# holds the port and answers its PINGs is not taken for ours) and answers
# PING; 1 when its process is gone first.
wait_up() {
	local dir=$1 port=$2 pid=$3 before=$4 i
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		# (NOAUTH: up, with a password)
		if [ "$(readies "$dir" "$port")" -gt "$before" ] &&
			cli "$port" ping 2>/dev/null | grep -q -e PONG -e NOAUTH; then
			return 0
		fi
		sleep 0.05
	done
	return 1
}

# Starts the server whose config is DIR/PORT/redis.conf. 0 when it answers.
launch() {
	local dir=$1 port=$2 before
	before=$(readies "$dir" "$port")
	redis-server "$dir/$port/redis.conf" >>"$dir/$port/stdout" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$dir/$port/pid"
	if ! wait_up "$dir" "$port" "$pid" "$before"; then
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		return 1
	fi
	return 0
}

# Creates DIR/PORT with a config and starts it on a free port; prints the
# port. Extra arguments are redis.conf lines ("name value").
start_one() {
	local dir=$1 cluster=$2; shift 2
	local try port
	for try in $(seq 1 40); do
		# High ports; a cluster node also needs port + 10000.
		port=$((20000 + (RANDOM * 32768 + RANDOM) % 35000))
		mkdir "$dir/$port" 2>/dev/null || continue
		{
			if [ "${tls_server:-0}" = 1 ]; then
				echo "port 0"
				echo "tls-port $port"
				echo "tls-cert-file $dir/tls/server.crt"
				echo "tls-key-file $dir/tls/server.key"
				echo "tls-ca-cert-file $dir/tls/ca.crt"
				echo "tls-auth-clients optional"
				if [ "$cluster" = 1 ]; then
					echo "tls-cluster yes"
					echo "tls-replication yes"
				fi
			else
				echo "port $port"
			fi
			echo "bind 127.0.0.1"
			echo "protected-mode yes"
			echo "daemonize no"
			echo "dir $dir/$port"
			echo "logfile $dir/$port/log"
			echo "save \"\""
			echo "appendonly no"
			if [ "$cluster" = 1 ]; then
				echo "cluster-enabled yes"
				echo "cluster-config-file nodes.conf"
				echo "cluster-node-timeout 1000"
			fi
			for opt in "$@"; do echo "$opt"; done
		} >"$dir/$port/redis.conf"
		[ "${tls_server:-0}" = 1 ] && : >"$dir/$port/tls"
		if launch "$dir" "$port"; then
			echo "$port"
			return 0
		fi
		if grep -q "Address already in use" "$dir/$port/log" 2>/dev/null; then
			rm -rf "${dir:?}/$port"
			continue
		fi
		cat "$dir/$port/log" >&2 2>/dev/null
		die "redis-server on port $port did not start (see above)"
	done
	die "no free port found after 40 tries"
}

# Converts "--name value" command-line style options into conf lines.
conf_lines() {
	local out=() name=""
	for a in "$@"; do
		if [ "${a#--}" != "$a" ]; then
			[ -n "$name" ] && out+=("$name yes")
			name=${a#--}
		elif [ -n "$name" ]; then
			out+=("$name $a")
			name=""
		fi
	done
	[ -n "$name" ] && out+=("$name yes")
	printf '%s\n' "${out[@]}"
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: servers.sh standalone|cluster|certs|tls-standalone|tls-cluster|kill|pause|resume|restart|stop DIR [PORT]"
[ -d "$dir" ] || die "no directory $dir"

case $cmd in
standalone)
	shift 2
	mapfile -t lines < <(conf_lines "$@")
	start_one "$dir" 0 "${lines[@]}"
	;;
certs)
	make_certs "$dir"
	;;
tls-standalone)
	shift 2
	make_certs "$dir"
	mapfile -t lines < <(conf_lines "$@")
	tls_server=1 start_one "$dir" 0 "${lines[@]}"
	;;
cluster|tls-cluster)
	n=6; nrep=1; tls_server=0
	if [ "$cmd" = tls-cluster ]; then
		n=3; nrep=0; tls_server=1
		make_certs "$dir"
	fi
	ports=()
	for i in $(seq 1 $n); do
		p=$(start_one "$dir" 1) || exit 1
		ports+=("$p")
	done
	addrs=()
	for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
	create=(redis-cli)
	[ $tls_server = 1 ] && create+=(--tls --cacert "$dir/tls/ca.crt"
		--cert "$dir/tls/client.crt" --key "$dir/tls/client.key")
	"${create[@]}" --cluster create "${addrs[@]}" --cluster-replicas $nrep \
		--cluster-yes >"$dir/cluster-create.log" 2>&1 ||
		{ cat "$dir/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
	# Every node sees a healthy cluster and every replica is in sync.
	for i in $(seq 1 200); do
		ok=1
		for p in "${ports[@]}"; do
			cli "$p" cluster info 2>/dev/null | grep -q "cluster_state:ok" || ok=0
			# Every node knows every replica (CLUSTER SLOTS lists them).
			[ "$(cli "$p" cluster nodes 2>/dev/null | grep -v fail | grep -c slave)" = $((n / 2 * nrep)) ] || ok=0
			role=$(cli "$p" role 2>/dev/null | head -1)
			if [ "$role" = slave ]; then
				cli "$p" info replication | grep -q "master_link_status:up" || ok=0
			fi
		done
		"${create[@]}" --cluster check "127.0.0.1:${ports[0]}" 2>/dev/null |
			grep -q "All 16384 slots covered" || ok=0
		[ $ok = 1 ] && break
		sleep 0.05
	done
	[ $ok = 1 ] || die "the cluster did not become healthy"
	masters=(); replicas=()
	for p in "${ports[@]}"; do
		if [ "$(cli "$p" role | head -1)" = master ]; then masters+=("$p"); else replicas+=("$p"); fi
	done
	echo "${masters[*]} ${replicas[*]}"
	;;
kill|pause|resume)
	port=${3:?port}
	pid=$(cat "$dir/$port/pid" 2>/dev/null) || die "no server on port $port in $dir"
	case $cmd in
	kill) kill -9 "$pid" 2>/dev/null; for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.02; done ;;
	pause) kill -STOP "$pid" ;;
	resume) kill -CONT "$pid" ;;
	esac
	;;
restart)
	port=${3:?port}
	launch "$dir" "$port" || die "redis-server on port $port did not restart"
	;;
stop)
	for pf in "$dir"/*/pid; do
		[ -f "$pf" ] || continue
		pid=$(cat "$pf")
		kill -CONT "$pid" 2>/dev/null
		kill -9 "$pid" 2>/dev/null
		rm -f "$pf"
		pids="${pids:-} $pid"
	done
	for i in $(seq 1 100); do
		alive=0
		for pid in ${pids:-}; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.02
	done
	;;
*)
	die "unknown command $cmd"
	;;
esac
