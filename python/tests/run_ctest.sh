#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the Python binding's pytest suite for ctest (tests/CMakeLists.txt).
#
# Picks the first interpreter that has both pytest and numpy: $KVLINK_PYTHON,
# then python3 on PATH, then Debian's /usr/bin/python3 (what scripts/deps.sh
# installs python3-pytest and python3-numpy into). Exits 77 (skipped) when
# there is none, or in a sanitizer build (an unsanitized interpreter cannot
# load a sanitized libkvlink.so). $KVLINK_LIBRARY names the library to test.
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$KVLINK_SANITIZE" ]; then
	echo "SKIP: sanitizer build ($KVLINK_SANITIZE): the Python tests need an unsanitized libkvlink.so"
	exit 77
fi
for py in "$KVLINK_PYTHON" python3 /usr/bin/python3; do
	[ -n "$py" ] || continue
	command -v "$py" >/dev/null 2>&1 || continue
	if "$py" -c "import pytest, numpy" >/dev/null 2>&1; then
		echo "python: $(command -v "$py") ($("$py" --version 2>&1)); library: ${KVLINK_LIBRARY:-found by the package}"
		PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -p no:cacheprovider \
			--rootdir "$here/.." "$here" "$@"
	fi
done
echo "SKIP: no python3 with pytest and numpy (Debian: apt-get install python3-pytest python3-numpy)"
exit 77
