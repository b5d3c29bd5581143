# SPDX-License-Identifier: Apache-2.0
"""The engine adapters' settings (kvlink._engine.config, docs/
configuration.md): the engine's extra config wins over KVL_<KEY> in the
environment, which wins over a config file (config_file, else $KVL_CONFIG;
JSON or TOML, its engine's section over its top), which wins over the
defaults; unknown keys, malformed files and values that do not fit are
errors naming where they came from."""

import json
import sys

import pytest

from kvlink._engine import config

DEFAULTS = {"store": "mem:", "io_batch": 0, "load_timeout_s": 60.0,
            "model_tag": None}
WHAT = "test: extra config"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in list(DEFAULTS) + ["config"]:
        monkeypatch.delenv("KVL_" + key.upper(), raising=False)


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_defaults_alone():
    assert config(None, DEFAULTS, WHAT) == DEFAULTS


def test_precedence(tmp_path, monkeypatch):
    path = write(tmp_path, "kvlink.json",
                 {"store": "file-store", "io_batch": 1, "model_tag": "m",
                  "sglang": {"io_batch": 2}, "vllm": {"io_batch": 3}})
    monkeypatch.setenv("KVL_CONFIG", path)
    # The file alone, its engine's section over its top.
    assert config(None, DEFAULTS, WHAT, "sglang") == {
        **DEFAULTS, "store": "file-store", "io_batch": 2, "model_tag": "m"}
    assert config(None, DEFAULTS, WHAT, "vllm")["io_batch"] == 3
    assert config(None, DEFAULTS, WHAT)["io_batch"] == 1
    # The environment over the file, typed after the default.
    monkeypatch.setenv("KVL_STORE", "env-store")
    monkeypatch.setenv("KVL_IO_BATCH", "7")
    monkeypatch.setenv("KVL_LOAD_TIMEOUT_S", "2.5")
    cfg = config(None, DEFAULTS, WHAT, "sglang")
    assert (cfg["store"], cfg["io_batch"], cfg["load_timeout_s"],
            cfg["model_tag"]) == ("env-store", 7, 2.5, "m")
    # The engine's own config over everything.
    cfg = config({"store": "given", "io_batch": 9}, DEFAULTS, WHAT, "sglang")
    assert (cfg["store"], cfg["io_batch"]) == ("given", 9)


def test_config_file_key_over_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("KVL_CONFIG", write(tmp_path, "a.json",
                                           {"store": "from-env-file"}))
    other = write(tmp_path, "b.json", {"store": "from-key-file"})
    cfg = config({"config_file": other}, DEFAULTS, WHAT)
    assert cfg["store"] == "from-key-file" and "config_file" not in cfg


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_toml(tmp_path):
    path = write(tmp_path, "kvlink.toml",
                 'store = "toml-store"\nio_batch = 4\n[vllm]\nio_batch = 5\n')
    cfg = config({"config_file": path}, DEFAULTS, WHAT, "vllm")
    assert (cfg["store"], cfg["io_batch"]) == ("toml-store", 5)


@pytest.mark.parametrize("data,why", [
    ({"stor": "x"}, "unknown keys ['stor']"),
    ({"sglang": {"io_bach": 1}}, "[sglang]: unknown keys ['io_bach']"),
    ({"sglang": 5}, "must be a table"),
    ([1, 2], "expected an object"),
    ("{not json", "not JSON"),
])
def test_bad_files(tmp_path, data, why):
    path = write(tmp_path, "bad.json", data)
    with pytest.raises(ValueError) as e:
        config({"config_file": path}, DEFAULTS, WHAT, "sglang")
    assert why in str(e.value) and (path in str(e.value) or
                                    "expected" in str(e.value))


def test_missing_file():
    with pytest.raises(OSError):
        config({"config_file": "/nonexistent/kvlink.json"}, DEFAULTS, WHAT)


def test_bad_environment(monkeypatch):
    monkeypatch.setenv("KVL_IO_BATCH", "lots")
    with pytest.raises(ValueError, match="KVL_IO_BATCH='lots'"):
        config(None, DEFAULTS, WHAT)


def test_unknown_given_key():
    with pytest.raises(ValueError, match="unknown keys \\['stor'\\]"):
        config({"stor": 1}, DEFAULTS, WHAT)


def test_adapters_read_the_environment(monkeypatch):
    """kvlink.sglang takes KVL_<KEY> too: a bad one fails its start."""
    sg = pytest.importorskip("sglang_standins")
    pytest.importorskip("numpy")
    from test_sglang import Server
    monkeypatch.setenv("KVL_IO_BATCH", "lots")
    with pytest.raises(ValueError, match="KVL_IO_BATCH"):
        Server("mha", "mem:")
    assert sg  # the stand-ins were importable


@pytest.mark.parametrize("name", ["KVL_LIBRARY", "KVLINK_LIBRARY"])
def test_library_variable(name):
    """KVL_LIBRARY names the library (KVLINK_LIBRARY, its old name, still
    works); one that does not load fails the import, naming the variable."""
    import os
    import subprocess
    import kvlink
    from kvlink import _lib
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVL_LIBRARY", "KVLINK_LIBRARY")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(kvlink.__file__))
    code = "import kvlink; print(kvlink.library_path)"
    good = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env={**env, name: _lib.path})
    assert good.returncode == 0 and good.stdout.strip() == _lib.path, \
        good.stderr
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, env={**env, name: "/nonexistent/lib.so"})
    assert bad.returncode != 0
    assert f"{name} is set but does not load" in bad.stderr
