#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fuzz/run.sh — builds the libFuzzer targets with clang (CMake, KVL_FUZZ=ON)
# and runs each one over its seed corpus in fuzz/corpus/<target>/.
#
# usage: sh fuzz/run.sh [TARGET...]        (default: every target built)
# environment:
#   CC          the clang to use (default: clang)
#   FUZZ_BUILD  build directory (default: build-fuzz)
#   FUZZ_TIME   seconds per target (default: 20, what CI runs)
#   FUZZ_JOBS   libFuzzer -jobs (default: 1)
#   FUZZ_OUT    directory for new corpus entries, logs and crash files
#               (default: $FUZZ_BUILD/out; the seed corpus is never written)
#   JOBS        build parallelism
# Exits non-zero on the first target that finds a crash, a leak, a timeout
# or a failed check; its reproducer is in $FUZZ_OUT/<target>/.
#
# Reproduce a finding:  $FUZZ_BUILD/fuzz/<target> <crash-file>
# A long local run:     FUZZ_TIME=600 sh fuzz/run.sh fuzz_uri
set -eu
cd "$(dirname "$0")/.."

CC=${CC:-clang}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_TIME=${FUZZ_TIME:-20}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_OUT=${FUZZ_OUT:-$FUZZ_BUILD/out}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

if ! command -v "$CC" >/dev/null 2>&1; then
	echo "fuzz/run.sh: $CC not found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
	exit 1
fi

mkdir -p "$FUZZ_BUILD"
cmake -S . -B "$FUZZ_BUILD" -DCMAKE_C_COMPILER="$CC" -DKVL_FUZZ=ON \
	-DKVL_BUILD_TESTS=OFF -DKVL_WITH_CUDA=OFF \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo >"$FUZZ_BUILD/configure.log" 2>&1 ||
	{ cat "$FUZZ_BUILD/configure.log"; exit 1; }
cmake --build "$FUZZ_BUILD" --target fuzz_all -j "$JOBS"

targets="$*"
[ -n "$targets" ] || targets=$(cat "$FUZZ_BUILD/fuzz_targets.txt" | tr ';' ' ')

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
status=0
for t in $targets; do
	bin=$(abs "$FUZZ_BUILD/fuzz/$t")
	name=${t#fuzz_}
	seeds=$(abs "fuzz/corpus/$name")
	out=$(abs "$FUZZ_OUT/$t")
	mkdir -p "$out/corpus"
	[ -d "$seeds" ] || { echo "fuzz/run.sh: no seed corpus $seeds" >&2; exit 1; }
	echo "== $t: ${FUZZ_TIME}s over $seeds"
	# -timeout: one input taking 10 s is a finding (a hang);
	# -rss_limit_mb: a run that grows past 2 GiB is one (a leak).
	par=""
	[ "$FUZZ_JOBS" -le 1 ] || par="-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS"
	# shellcheck disable=SC2086
	# Runs in $out: libFuzzer writes its job logs and artifacts there.
	if ! (cd "$out" && exec "$bin" -max_total_time="$FUZZ_TIME" $par \
		-timeout=10 -rss_limit_mb=2048 -max_len=8192 \
		-print_final_stats=1 -artifact_prefix="$out/" \
		"$out/corpus" "$seeds") >"$out/log" 2>&1; then
		tail -60 "$out/log"
		echo "== $t: FINDING (reproducer in $out/)"
		status=1
		break
	fi
	grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$out/log" |
		sed "s/^/   /"
done
exit $status
