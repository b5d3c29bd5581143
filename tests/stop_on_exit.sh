# SPDX-License-Identifier: Apache-2.0
# stop_on_exit.sh — sourced by the run.sh scripts that start throwaway
# servers. `stop_on_exit DIR CMD [ARGS…]` makes CMD run and DIR go when the
# sourcing script exits: normally, on a signal, or killed with SIGKILL (a
# watchdog process notices that the script is gone).

stop_on_exit() {
	_stop_dir=$1
	shift
	_stop_cmd=("$@")
	_stop_watchdog=""
	trap _stop_now EXIT
	trap 'exit 143' TERM INT HUP
	local self=$$
	( while kill -0 "$self" 2>/dev/null; do sleep 1; done
	  "${_stop_cmd[@]}"; rm -rf "$_stop_dir" ) >/dev/null 2>&1 </dev/null &
	_stop_watchdog=$!
}

_stop_now() {
	"${_stop_cmd[@]}"
	[ -n "$_stop_watchdog" ] && kill "$_stop_watchdog" 2>/dev/null
	rm -rf "$_stop_dir"
}
