#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# spdx.sh ROOT — every source file of the tree (C, CUDA, Python, shell,
# CMake, the Makefile and the build templates) names kvlink's license,
# Apache-2.0, with an SPDX line among its first three lines.
root=${1:?usage: spdx.sh ROOT}
cd "$root" || exit 1
tag='SPDX-License-Identifier: Apache-2.0'
missing=$(
	{
		find include src tools tests bench fuzz python examples cmake \
			scripts .ci \
			\( -name corpus -o -name '__pycache__' \
			   -o -name '*.egg-info' \) -prune -o -type f \
			\( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.py' \
			   -o -name '*.sh' -o -name '*.in' -o -name '*.map' \
			   -o -name '*.toml' -o -name '*.supp' -o -name run \
			   -o -name CMakeLists.txt \) -print
		echo CMakeLists.txt
		echo Makefile
	} | while read -r f; do
		head -n 3 "$f" | grep -q "$tag" || echo "$f"
	done
)
n=$(printf '%s\n' "$missing" | grep -c .)
if [ "$n" -gt 0 ]; then
	echo "FAIL: $n source files without '$tag' in their first 3 lines:"
	printf '%s\n' "$missing"
	exit 1
fi
[ -f LICENSE ] && grep -q 'Apache License' LICENSE ||
	{ echo "FAIL: no Apache-2.0 LICENSE at the top"; exit 1; }
echo "ok: every source file names Apache-2.0; LICENSE is there"
