# SPDX-License-Identifier: Apache-2.0
"""kvlink_build — the in-tree PEP 517 build backend of the kvlink bindings.

Why not setuptools: ``pip install ./python`` builds in an isolated
environment and would download setuptools there, which fails offline. The
package is pure Python (ctypes), so building it needs nothing but the
standard library: this backend writes the wheel (a zip with the package and
its ``.dist-info``) and the sdist (a tar.gz) itself, and declares no build
requirements.

The sdist carries the C library's sources (csrc/): a wheel built from it
builds the library with CMake and carries it.

Bundling the C library: in a source checkout where ``make`` has built
build/libkvlink.so, the wheel carries it as ``kvlink/libkvlink.so``, where
the package looks first after ``$KVLINK_LIBRARY``, and is tagged for this
platform. ``KVLINK_BUNDLE_LIBRARY=/path/to/libkvlink.so`` (or ``pip install
--config-settings library=/path/…``; a relative path is taken from where
pip was started) bundles another one, ``none`` none: the wheel is then
``py3-none-any`` and the library is found at run time (``$KVLINK_LIBRARY``,
``ldconfig``, or a source checkout's build/).

The version is not written in pyproject.toml (it lists it as dynamic): it is
kvlink's, read from the KVL_VERSION_* macros of ../include/kvlink.h when
building from a source checkout, and from PKG-INFO when building from an
sdist (which carries no header; build_sdist writes the header's version
into its PKG-INFO).

Hooks: build_wheel, build_sdist, build_editable (a ``.pth`` pointing at this
directory), and the prepare_metadata / get_requires variants.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "kvlink"
# The C library's header, in a source checkout (python/ is ROOT).
HEADER = os.path.join(os.path.dirname(ROOT), "include", "kvlink.h")
PKG_INFO = os.path.join(ROOT, "PKG-INFO")


def _project():
    """name, description, requires-python, … from pyproject.toml."""
    path = os.path.join(ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python 3.11+
        proj = tomllib.loads(raw.decode())["project"]
    except ImportError:  # a minimal reader of the [project] fields used
        text = raw.decode()
        body = text.split("[project]", 1)[1].split("\n[", 1)[0]
        proj = dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', body, re.M))
        m = re.search(r'^dynamic\s*=\s*\[([^\]]*)\]', body, re.M)
        if m:
            proj["dynamic"] = re.findall(r'"([^"]*)"', m.group(1))
    if "version" in proj:
        raise ValueError(f"kvlink_build: {path}: [project] sets version "
                         f"{proj['version']!r} by hand; kvlink's version "
                         f"comes from include/kvlink.h (declare dynamic = "
                         f"[\"version\"])")
    dynamic = proj.get("dynamic")
    if isinstance(dynamic, list) and "version" not in dynamic:
        raise ValueError(f"kvlink_build: {path}: [project] must list "
                         f"\"version\" in dynamic (it comes from "
                         f"include/kvlink.h)")
    return proj


def _header_version(path):
    """MAJOR.MINOR.PATCH from kvlink.h's KVL_VERSION_* macros."""
    with open(path) as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^\s*#\s*define\s+KVL_VERSION_{part}\s+(\d+)\s*$",
                      text, re.M)
        if not m:
            raise ValueError(f"kvlink_build: {path} has no "
                             f"KVL_VERSION_{part}")
        parts.append(str(int(m.group(1))))
    return ".".join(parts)


def _pkg_info_version(path):
    """The Version field of an sdist's PKG-INFO."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                break  # the headers end; the description follows
            if line.lower().startswith("version:"):
                return line.split(":", 1)[1].strip()
    raise ValueError(f"kvlink_build: {path} has no Version field")


def version():
    """kvlink's version: from PKG-INFO when building from an sdist, else
    from ../include/kvlink.h when building from a source checkout."""
    if os.path.isfile(PKG_INFO):
        return _pkg_info_version(PKG_INFO)
    if os.path.isfile(HEADER):
        return _header_version(HEADER)
    raise FileNotFoundError(
        f"kvlink_build: cannot tell kvlink's version: neither {PKG_INFO} "
        f"(an sdist) nor {HEADER} (a source checkout) exists; build from a "
        f"kvlink checkout's python/ directory or from its sdist")


def _metadata():
    p = dict(_project())
    p["version"] = version()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
    ]
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    extras = p.get("optional-dependencies", {})
    for extra, reqs in sorted(extras.items()) if isinstance(extras, dict) \
            else []:
        lines.append(f"Provides-Extra: {extra}")
        for r in reqs:
            lines.append(f'Requires-Dist: {r}; extra == "{extra}"')
    return p, "\n".join(lines) + "\n"


def _dist_info(p):
    return f"{p['name'].replace('-', '_')}-{p['version']}.dist-info"


# The library a source checkout's `make` builds (python/ is ROOT).
CHECKOUT_LIBRARY = os.path.join(os.path.dirname(ROOT), "build",
                                "libkvlink.so")


# In an sdist, the C library's sources (csrc/, what its CMake build of the
# library and the tool needs): a wheel built from it builds the library.
CSRC = os.path.join(ROOT, "csrc")
_C_TREE = ("CMakeLists.txt", "LICENSE", "include", "src", "cmake", "tools",
           "bench")


def _c_sources():
    """(arcname, path) of the C tree, from a checkout (python/ is ROOT) or
    from an sdist's csrc/."""
    top = CSRC if os.path.isdir(CSRC) else os.path.dirname(ROOT)
    if not os.path.isfile(os.path.join(top, "CMakeLists.txt")):
        return []
    out = []
    for part in _C_TREE:
        path = os.path.join(top, part)
        if os.path.isfile(path):
            out.append((f"csrc/{part}", path))
        for d, dirs, names in os.walk(path):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for fn in sorted(names):
                full = os.path.join(d, fn)
                rel = os.path.relpath(full, top).replace(os.sep, "/")
                out.append((f"csrc/{rel}", full))
    return out


def _build_from_sources():
    """Builds libkvlink.so from the sdist's csrc/ with CMake (no tests),
    in a temporary directory, and returns its bytes. RuntimeError with the
    build's last lines when it fails."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("kvlink_build: building the C library from this "
                           "sdist needs cmake (and a C compiler); or set "
                           "KVL_BUNDLE_LIBRARY=/path/to/libkvlink.so, or "
                           "none to find it at run time")
    with tempfile.TemporaryDirectory(prefix="kvlink-build-") as out:
        for step in ([cmake, "-S", CSRC, "-B", out,
                      "-DCMAKE_BUILD_TYPE=Release", "-DKVL_BUILD_TESTS=OFF"],
                     [cmake, "--build", out, "--target", "kvlink",
                      "-j", str(os.cpu_count() or 2)]):
            r = subprocess.run(step, capture_output=True, text=True)
            if r.returncode:
                tail = "\n".join((r.stdout + r.stderr).splitlines()[-30:])
                raise RuntimeError(f"kvlink_build: {' '.join(step)} "
                                   f"failed:\n{tail}")
        with open(os.path.join(out, "libkvlink.so"), "rb") as f:
            return f.read()


def _bundled_library(config_settings):
    """The library the wheel carries (a path, or the bytes of one just
    built), or None. Asked for (config setting
    ``library``, else $KVL_BUNDLE_LIBRARY or its old name
    $KVLINK_BUNDLE_LIBRARY): that path, a relative one
    taken from the directory pip was started in ($PWD), this one or the
    checkout's top; "none" for no library. Not asked: the checkout's
    build/libkvlink.so when `make` has built it, else, in an sdist, the
    library built from its csrc/."""
    lib = (config_settings or {}).get("library")
    for name in ("KVL_BUNDLE_LIBRARY", "KVLINK_BUNDLE_LIBRARY"):
        if lib is None:  # KVLINK_: the name before 0.5, still read
            lib = os.environ.get(name)
    if lib is None and os.path.isfile(CHECKOUT_LIBRARY):
        return os.path.realpath(CHECKOUT_LIBRARY)
    if lib is None:
        return _build_from_sources() if os.path.isdir(CSRC) else None
    if lib.lower() in ("", "none"):
        return None
    bases = [os.environ.get("PWD"), os.getcwd(), os.path.dirname(ROOT)]
    tried = [lib] if os.path.isabs(lib) else \
        [os.path.join(b, lib) for b in bases if b]
    for path in tried:
        if os.path.isfile(path):
            return os.path.realpath(path)
    raise FileNotFoundError("kvlink_build: library to bundle not found: "
                            + ", ".join(tried))


def _platform_tag():
    return re.sub(r"[^\w]", "_", sysconfig.get_platform())


def _package_files():
    """(archive name, path) of every file of the package, sorted."""
    out = []
    pkg = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")) or fn.startswith("libkvlink.so"):
                continue
            full = os.path.join(dirpath, fn)
            out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"),
                        full))
    return out


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data, mode=0o644):
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{name},sha256={digest},{len(data)}")

    def close(self, dist_info):
        name = f"{dist_info}/RECORD"
        self.record.append(f"{name},,")
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _write_dist_info(whl, p, metadata, tag):
    di = _dist_info(p)
    whl.add(f"{di}/METADATA", metadata.encode())
    whl.add(f"{di}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: kvlink_build\n"
        f"Root-Is-Purelib: {'true' if tag.endswith('any') else 'false'}\n"
        f"Tag: {tag}\n").encode())
    whl.add(f"{di}/top_level.txt", f"{PACKAGE}\n".encode())
    return di


def _build(wheel_directory, config_settings, editable):
    p, metadata = _metadata()
    lib = None if editable else _bundled_library(config_settings)
    tag = f"py3-none-{_platform_tag()}" if lib else "py3-none-any"
    name = f"{p['name'].replace('-', '_')}-{p['version']}-{tag}.whl"
    whl = _Wheel(os.path.join(wheel_directory, name))
    if editable:
        whl.add(f"__editable__.{PACKAGE}.pth", (ROOT + "\n").encode())
    else:
        for arcname, full in _package_files():
            with open(full, "rb") as f:
                whl.add(arcname, f.read())
        if isinstance(lib, bytes):
            whl.add(f"{PACKAGE}/libkvlink.so", lib, 0o755)
        elif lib:
            with open(lib, "rb") as f:
                whl.add(f"{PACKAGE}/libkvlink.so", f.read(), 0o755)
    di = _write_dist_info(whl, p, metadata, tag)
    whl.close(di)
    return name


# ------------------------------------------------------------- PEP 517 hooks

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p, metadata = _metadata()
    di = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w") as f:
        f.write(metadata)
    return os.path.basename(di)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, config_settings, editable=False)


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    return _build(wheel_directory, config_settings, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    p, metadata = _metadata()
    base = f"{p['name'].replace('-', '_')}-{p['version']}"
    name = f"{base}.tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build/kvlink_build.py", os.path.abspath(__file__))]
    files += _package_files()
    files += _c_sources()
    tests = os.path.join(ROOT, "tests")
    for fn in sorted(os.listdir(tests)) if os.path.isdir(tests) else []:
        if fn.endswith((".py", ".sh")):
            files.append((f"tests/{fn}", os.path.join(tests, fn)))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                      format=tarfile.PAX_FORMAT) as tar:
        def add(arcname, data, mode=0o644):
            info = tarfile.TarInfo(f"{base}/{arcname}")
            info.size = len(data)
            info.mode = mode
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        add("PKG-INFO", metadata.encode())
        for arcname, full in files:
            with open(full, "rb") as f:
                add(arcname, f.read())
    return name
