#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install_consumers.sh BUILD VERSION — installs the build into a throwaway
# prefix (cmake --install --prefix) and builds a consumer of kvlink.h
# against it, four ways: with pkg-config, linked with the shared library,
# and with the static one and `pkg-config --static`'s libraries; with CMake
# (find_package(kvlink VERSION)), linked with kvlink::kvlink and with
# kvlink::kvlink_static. Each must run and report VERSION. Exits 77
# (skipped) without pkg-config or cc, and in sanitizer builds (whose
# library an unsanitized consumer cannot link).
build=${1:?usage: install_consumers.sh BUILD VERSION}
want=${2:?usage: install_consumers.sh BUILD VERSION}
if [ -n "$KVLINK_SANITIZE" ]; then
	echo "SKIP: sanitizer build ($KVLINK_SANITIZE)"
	exit 77
fi
for t in pkg-config cc cmake; do
	command -v "$t" >/dev/null 2>&1 || { echo "SKIP: no $t"; exit 77; }
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; echo "FAIL: cmake --install"; exit 1; }
[ -f "$tmp/prefix/share/man/man1/kvlink.1" ] ||
	{ echo "FAIL: the man page is not installed in share/man/man1"; exit 1; }
pc=$(find "$tmp/prefix" -name kvlink.pc)
[ -n "$pc" ] || { echo "FAIL: no kvlink.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
flags=$(pkg-config --cflags --libs kvlink) ||
	{ echo "FAIL: pkg-config kvlink"; exit 1; }
case "$flags" in
*"$tmp/prefix"*) ;;
*) echo "FAIL: pkg-config points outside the prefix: $flags"; exit 1 ;;
esac
libdir=$(pkg-config --variable=libdir kvlink)
cat >"$tmp/consumer.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <kvlink.h>
int main(int argc, char **argv)
{
	kvl_store *s = NULL;
	if (kvl_store_open("mem:", &s, NULL, 0))
		return 1;
	kvl_store_close(s);
	printf("%s\n", kvl_version());
	return argc > 1 && strcmp(argv[1], kvl_version()) ? 2 : 0;
}
C
# shellcheck disable=SC2086
cc "$tmp/consumer.c" $(pkg-config --cflags --libs kvlink) \
	-o "$tmp/dynamic" || { echo "FAIL: linking against libkvlink.so"; exit 1; }
LD_LIBRARY_PATH="$libdir" "$tmp/dynamic" "$want" ||
	{ echo "FAIL: the dynamically linked consumer"; exit 1; }
static_libs=$(pkg-config --static --libs kvlink | sed 's/-lkvlink//') ||
	{ echo "FAIL: pkg-config --static"; exit 1; }
# shellcheck disable=SC2086
cc "$tmp/consumer.c" $(pkg-config --cflags kvlink) "$libdir/libkvlink.a" \
	$static_libs -o "$tmp/static" ||
	{ echo "FAIL: linking against libkvlink.a with pkg-config --static's libraries"; exit 1; }
"$tmp/static" "$want" || { echo "FAIL: the statically linked consumer"; exit 1; }

# CMake: find_package with this version (a 0.x minor is all that fits).
mkdir "$tmp/cmake"
cp "$tmp/consumer.c" "$tmp/cmake/"
cat >"$tmp/cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(kvlink $want EXACT REQUIRED)
add_executable(shared consumer.c)
target_link_libraries(shared PRIVATE kvlink::kvlink)
add_executable(static consumer.c)
target_link_libraries(static PRIVATE kvlink::kvlink_static)
CMAKE
cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
	>"$tmp/cmake.log" 2>&1 &&
	cmake --build "$tmp/cmake/build" >>"$tmp/cmake.log" 2>&1 ||
	{ cat "$tmp/cmake.log"; echo "FAIL: a CMake consumer (find_package(kvlink))"; exit 1; }
for prog in shared static; do
	"$tmp/cmake/build/$prog" "$want" ||
		{ echo "FAIL: the CMake consumer linked $prog"; exit 1; }
done
echo "ok: pkg-config and find_package(kvlink) in $tmp/prefix; shared and static consumers report $want"
