# SPDX-License-Identifier: Apache-2.0
"""The in-tree build backend (python/_build/kvlink_build.py): wheels and
sdists hold the package and are named with kvlink's version, which nobody
writes in pyproject.toml: it comes from include/kvlink.h's KVL_VERSION_*
macros when building from a checkout, and from PKG-INFO when building from
an sdist (which has no header). A tree with neither, or a pyproject.toml
that sets the version by hand, is refused with a message that says so.

Each build runs the backend in a subprocess from the tree it builds, as
pip does."""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.dirname(HERE)  # the project: pyproject.toml, _build/, …
HEADER = os.path.join(os.path.dirname(PYTHON), "include", "kvlink.h")


def expected_version():
    """kvlink's version, read here without the backend: the header's
    macros in a checkout, else (running from an sdist) its PKG-INFO."""
    if os.path.isfile(HEADER):
        with open(HEADER) as f:
            text = f.read()
        return ".".join(
            re.search(rf"#define KVL_VERSION_{p} (\d+)", text).group(1)
            for p in ("MAJOR", "MINOR", "PATCH"))
    pkg_info = os.path.join(PYTHON, "PKG-INFO")
    if os.path.isfile(pkg_info):
        with open(pkg_info) as f:
            return re.search(r"^Version: (\S+)$", f.read(), re.M).group(1)
    pytest.skip(f"neither {HEADER} nor {pkg_info}: no version to expect")


def backend(root, hook, *args, bundle="none", pwd=None,
            var="KVL_BUNDLE_LIBRARY"):
    """Runs hook(*args) of the backend of project ``root`` with
    $KVLINK_BUNDLE_LIBRARY set to ``bundle`` (None: unset) and $PWD to
    ``pwd`` (None: root); its result, or the failure's text."""
    code = ("import json, sys; sys.path.insert(0, '_build'); "
            "import kvlink_build as b; "
            "print(json.dumps(getattr(b, sys.argv[1])(*sys.argv[2:])))")
    env = dict(os.environ, PWD=str(pwd or root))
    env.pop("KVLINK_BUNDLE_LIBRARY", None)
    env.pop("KVL_BUNDLE_LIBRARY", None)
    if bundle is not None:
        env[var] = bundle
    r = subprocess.run([sys.executable, "-c", code, hook] + list(args),
                       cwd=root, capture_output=True, text=True, timeout=60,
                       env=env)
    if r.returncode:
        return None, r.stderr
    return json.loads(r.stdout), r.stderr


def build(root, hook, out):
    name, err = backend(root, hook, str(out))
    assert name is not None, err
    return name


def wheel_metadata(path, version):
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        di = f"kvlink-{version}.dist-info"
        assert {"kvlink/__init__.py", "kvlink/linker.py", "kvlink/py.typed",
                f"{di}/METADATA", f"{di}/RECORD"} <= names
        assert not any("__pycache__" in n or n.endswith(".so")
                       for n in names)
        return z.read(f"{di}/METADATA").decode()


def test_checkout_version_comes_from_the_header(tmp_path):
    if not os.path.isfile(HEADER):
        pytest.skip(f"no {HEADER}: not a source checkout")
    v = expected_version()
    with open(os.path.join(PYTHON, "pyproject.toml")) as f:
        pyproject = f.read()
    assert not re.search(r"^version\s*=", pyproject, re.M)  # not by hand
    assert re.search(r'^dynamic\s*=\s*\["version"\]', pyproject, re.M)
    assert backend(PYTHON, "version")[0] == v
    name = build(PYTHON, "build_wheel", tmp_path)
    assert name == f"kvlink-{v}-py3-none-any.whl"
    meta = wheel_metadata(tmp_path / name, v)
    assert "Name: kvlink\n" in meta and f"Version: {v}\n" in meta
    md = tmp_path / "md"
    md.mkdir()
    assert build(PYTHON, "prepare_metadata_for_build_wheel", md) == \
        f"kvlink-{v}.dist-info"


def test_sdist_carries_the_version_in_pkg_info(tmp_path):
    v = expected_version()
    sd = build(PYTHON, "build_sdist", tmp_path)
    assert sd == f"kvlink-{v}.tar.gz"
    with tarfile.open(tmp_path / sd) as tar:
        names = set(tar.getnames())
        base = f"kvlink-{v}"
        assert {f"{base}/PKG-INFO", f"{base}/pyproject.toml",
                f"{base}/_build/kvlink_build.py", f"{base}/kvlink/__init__.py",
                f"{base}/tests/test_packaging.py"} <= names
        pkg_info = tar.extractfile(f"{base}/PKG-INFO").read().decode()
        assert f"\nVersion: {v}\n" in pkg_info
        unpacked = tmp_path / "unpacked"
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
            tar.extractall(unpacked, filter="data")
        else:
            tar.extractall(unpacked)
    # Built from the sdist, where there is no header: PKG-INFO tells.
    root = unpacked / base
    assert not (unpacked / "include" / "kvlink.h").exists()
    out = tmp_path / "from-sdist"
    out.mkdir()
    name = build(root, "build_wheel", out)
    assert name == f"kvlink-{v}-py3-none-any.whl"
    assert f"Version: {v}\n" in wheel_metadata(out / name, v)
    # It is PKG-INFO that is read: another version there names the wheel.
    (root / "PKG-INFO").write_text(pkg_info.replace(f"Version: {v}\n",
                                                    "Version: 9.8.7\n"))
    assert build(root, "build_wheel", out) == "kvlink-9.8.7-py3-none-any.whl"
    assert build(root, "build_sdist", out) == "kvlink-9.8.7.tar.gz"


def bare_project(tmp_path, pyproject=None):
    """python/'s pyproject.toml and backend alone: no header above, no
    PKG-INFO."""
    root = tmp_path / "project"
    shutil.copytree(os.path.join(PYTHON, "_build"), root / "_build",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(PYTHON, "kvlink"), root / "kvlink",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    with open(os.path.join(PYTHON, "pyproject.toml")) as f:
        text = f.read()
    (root / "pyproject.toml").write_text(pyproject(text) if pyproject
                                         else text)
    assert not (tmp_path / "include").exists()
    return root


def test_no_version_source_is_refused(tmp_path):
    root = bare_project(tmp_path)
    name, err = backend(root, "build_wheel", str(tmp_path))
    assert name is None
    assert "cannot tell kvlink's version" in err
    assert "PKG-INFO" in err and "kvlink.h" in err


@pytest.mark.parametrize("edit,why", [
    (lambda t: t.replace('dynamic = ["version"]',
                         'version = "0.1.0"\ndynamic = []'), "by hand"),
    (lambda t: t.replace('dynamic = ["version"]', 'dynamic = []'),
     "must list"),
])
def test_version_by_hand_is_refused(tmp_path, edit, why):
    root = bare_project(tmp_path, edit)
    (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: kvlink\n"
                                   "Version: 0.2.0\n")
    name, err = backend(root, "build_wheel", str(tmp_path))
    assert name is None and why in err


def checkout(tmp_path, with_library=True):
    """A checkout's shape: top/include/kvlink.h, top/python/ and, as if
    `make` had run, top/build/libkvlink.so (a stand-in file)."""
    top = tmp_path / "top"
    root = bare_project(tmp_path).rename(tmp_path / "python")
    root = shutil.move(str(root), str(top / "python"))
    (top / "include").mkdir()
    if os.path.isfile(HEADER):
        shutil.copy(HEADER, top / "include" / "kvlink.h")
    else:
        pytest.skip(f"no {HEADER}: not a source checkout")
    if with_library:
        (top / "build").mkdir()
        (top / "build" / "libkvlink.so").write_bytes(b"built by make")
    return top


def wheel_library(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        return z.read("kvlink/libkvlink.so") \
            if "kvlink/libkvlink.so" in names else None


def test_made_library_is_bundled(tmp_path):
    """After `make`, the wheel carries build/libkvlink.so unasked."""
    top = checkout(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    name, err = backend(top / "python", "build_wheel", str(out), bundle=None)
    assert name is not None, err
    assert not name.endswith("-any.whl")
    assert wheel_library(out / name) == b"built by make"
    # "none" asks for no library.
    name, err = backend(top / "python", "build_wheel", str(out))
    assert name.endswith("py3-none-any.whl"), err
    assert wheel_library(out / name) is None
    # No make, nothing asked: no library either.
    top2 = checkout(tmp_path / "b", with_library=False)
    (tmp_path / "out2").mkdir()
    name, err = backend(top2 / "python", "build_wheel",
                        str(tmp_path / "out2"), bundle=None)
    assert name.endswith("py3-none-any.whl"), err


def test_relative_bundle_path(tmp_path):
    """KVLINK_BUNDLE_LIBRARY=build/… works from the repository's top (pip
    started there, the backend run in python/), and a missing one says
    where it looked."""
    top = checkout(tmp_path)
    (top / "build" / "other.so").write_bytes(b"another")
    out = tmp_path / "out"
    out.mkdir()
    for var in ("KVL_BUNDLE_LIBRARY", "KVLINK_BUNDLE_LIBRARY"):
        name, err = backend(top / "python", "build_wheel", str(out),
                            bundle="build/other.so", pwd=top, var=var)
        assert name is not None, err
        assert wheel_library(out / name) == b"another"
    name, err = backend(top / "python", "build_wheel", str(out),
                        bundle="build/nothing.so", pwd=top)
    assert name is None
    assert "library to bundle not found" in err
    assert os.path.join(str(top), "build", "nothing.so") in err


def test_installed_in_a_venv(tmp_path):
    """pip install ./python into a fresh venv (offline: the backend needs
    nothing), with this library bundled: the package imports from anywhere
    without $KVLINK_LIBRARY and loads the copy it carries, and
    python -m kvlink says so."""
    from kvlink import _lib
    if not os.path.isfile(HEADER):
        pytest.skip(f"no {HEADER}: not a source checkout")
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode:
        pytest.skip(f"no venv here: {r.stderr.strip()[-200:]}")
    py = str(venv / "bin" / "python")
    env = dict(os.environ, KVLINK_BUNDLE_LIBRARY=os.path.realpath(_lib.path),
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("KVLINK_LIBRARY", None)
    env.pop("KVL_LIBRARY", None)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-m", "pip", "install", "-q", PYTHON],
                       capture_output=True, text=True, timeout=300, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    env.pop("KVLINK_BUNDLE_LIBRARY")
    r = subprocess.run([py, "-c", "import kvlink; print(kvlink.library_path);"
                        "print(kvlink.version())"],
                       capture_output=True, text=True, timeout=60, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    where, version = r.stdout.split()
    assert where.startswith(str(venv)) and where.endswith("libkvlink.so")
    assert version == expected_version()
    r = subprocess.run([py, "-m", "kvlink", "info"], capture_output=True,
                       text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert f"kvlink {version}" in r.stdout and where in r.stdout
    r = subprocess.run([py, "-m", "kvlink", "stat", "--store",
                        "mem:?capacity=1MiB", "--format", "json"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and \
        json.loads(r.stdout)["capacity"] == 1 << 20, r.stderr
    r = subprocess.run([py, "-m", "kvlink", "stat", "--store", "nosuch:"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "nosuch" in r.stderr


def test_sdist_builds_the_library(tmp_path):
    """The sdist carries the C sources (csrc/), and a wheel built from it,
    with nothing asked, builds the library with CMake and carries it: one
    that loads and reports the version."""
    import ctypes
    if not os.path.isfile(HEADER):
        pytest.skip(f"no {HEADER}: not a source checkout")
    if not shutil.which("cmake"):
        pytest.skip("no cmake")
    v = expected_version()
    sd = build(PYTHON, "build_sdist", tmp_path)
    with tarfile.open(tmp_path / sd) as tar:
        names = set(tar.getnames())
        base = f"kvlink-{v}"
        assert {f"{base}/csrc/CMakeLists.txt", f"{base}/csrc/LICENSE",
                f"{base}/csrc/include/kvlink.h",
                f"{base}/csrc/src/core/hash.c",
                f"{base}/csrc/cmake/kvlink.map"} <= names
        assert not any("/csrc/tests/" in n or "__pycache__" in n
                       for n in names)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path / "u", filter="data")
        else:
            tar.extractall(tmp_path / "u")
    out = tmp_path / "wheel"
    out.mkdir()
    name, err = backend(tmp_path / "u" / base, "build_wheel", str(out),
                        bundle=None)
    assert name is not None, err
    lib = wheel_library(out / name)
    assert lib and lib[:4] == b"\x7fELF"
    path = tmp_path / "libkvlink.so"
    path.write_bytes(lib)
    handle = ctypes.CDLL(str(path))
    handle.kvl_version.restype = ctypes.c_char_p
    assert handle.kvl_version().decode() == v
