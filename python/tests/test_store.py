# SPDX-License-Identifier: Apache-2.0
"""Stores by URI: opening errors with messages, objects by key (bytes,
pieces, numpy buffers), and stats."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import np
import kvlink as kvl


def test_bad_uris_raise_with_messages():
    with pytest.raises(kvl.ParseError) as ei:
        kvl.Store("mem:?capacty=1GiB")
    assert "capacty" in str(ei.value)
    assert ei.value.code == kvl.ERRORS["KVL_EPARSE"]
    with pytest.raises(kvl.ParseError, match="capacity"):
        kvl.Store("mem:?capacity=lots")
    with pytest.raises(kvl.NotSupported):
        kvl.Store("nosuchstore://x")
    assert isinstance(ei.value, ValueError)


def test_uri_passwords_are_never_shown():
    pw = "s3cr3t-Pa55"
    assert kvl.redact_uri(f"redis://u:{pw}@h:1/2?ttl=3") == \
        "redis://u:***@h:1/2?ttl=3"
    assert kvl.redact_uri(f"rediss://:{pw}@h:1?tls_ca=/a@b") == \
        "rediss://:***@h:1?tls_ca=/a@b"
    assert kvl.redact_uri(f"redis://h:1?password={pw}") == \
        "redis://h:1?password=***"
    assert kvl.redact_uri("mem:?capacity=1G") == "mem:?capacity=1G"
    assert kvl.redact_uri(":a@" * 100).count("***") == 0
    with pytest.raises(TypeError):
        kvl.redact_uri(5)
    assert kvl.has_feature("tls") == kvl.has_feature("redis")
    # A store that does not open: the message and the error's text.
    for uri in (f"redis://:{pw}@127.0.0.1:1?ttl",
                f"redis://u:{pw}@127.0.0.1:1?connect_timeout_ms=100",
                f"rediss://u:{pw}@127.0.0.1:1?tls_ca=/nonexistent/ca"):
        with pytest.raises(kvl.KvlinkError) as ei:
            kvl.Store(uri)
        assert pw not in str(ei.value) and pw not in repr(ei.value)
        assert ":***@" in str(ei.value) or "ttl" not in uri


@pytest.fixture
def password_redis(tmp_path):
    """A throwaway redis-server that needs PASSWORD: its port (skips
    without redis-server or a build without the Redis store)."""
    if not kvl.has_feature("redis") or not shutil.which("redis-server"):
        pytest.skip("no redis-server, or no redis:// in this build")
    servers = os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                           "redis", "servers.sh")
    try:
        out = subprocess.run(["bash", servers, "standalone", str(tmp_path),
                              "--requirepass", PASSWORD], check=True,
                             capture_output=True, text=True, timeout=60)
        yield int(out.stdout.strip())
    finally:
        subprocess.run(["bash", servers, "stop", str(tmp_path)], timeout=60)


PASSWORD = "s3cr3t-Pa55"


def test_repr_hides_the_password(password_redis):
    uri = f"redis://default:{PASSWORD}@127.0.0.1:{password_redis}"
    with kvl.Store(uri) as s:
        assert s.put("k", b"v")
        assert repr(s) == \
            f"<kvlink.Store 'redis://default:***@127.0.0.1:{password_redis}'>"
        layout = kvl.Layout("repr-test", 16)
        pool = layout.add_pool("kv")
        layout.add_array(pool, "k", 0, np.zeros((4, 64), np.uint8))
        layout.finalize()
        with kvl.Linker(layout, s) as lk:
            assert PASSWORD not in repr(lk)
            assert ":***@" in repr(lk)
    assert PASSWORD not in repr(s)


def test_objects_round_trip():
    with kvl.Store("mem:?capacity=1MiB") as s:
        assert not s.exists("a")
        assert s.put("a", b"hello world") is True
        assert s.put("a", b"other") is False  # present: not an error
        assert s.exists("a")
        assert s.get("a", 11) == b"hello world"
        assert s.get("a", 5, offset=6) == b"world"
        assert s.put("b", [b"ab", bytearray(b"cd"), memoryview(b"ef")])
        assert s.get("b", 6) == b"abcdef"
        arr = np.arange(16, dtype=np.uint32)
        assert s.put("c", arr)
        out = np.zeros(16, np.uint32)
        assert s.get_into("c", out) == 64
        assert np.array_equal(out, arr)
        assert s.exists_many(["a", "b", "zz"]) == [True, True, False]
        assert s.get_many(["a", "zz"], 11) == [b"hello world", None]
        assert s.put_many([("d", b"1"), ("a", b"x")]) == [True, False]
        with pytest.raises(kvl.NotFound, match="zz"):
            s.get("zz", 4)
        with pytest.raises(kvl.OutOfRange):
            s.get("a", 12)
        assert s.remove("a") and not s.remove("a")
        st = s.stats()
        assert st["objects"] == 3 and st["capacity"] == 1 << 20
        assert st["puts"] == 4
        j = json.loads(s.render_stats("json"))
        assert j["objects"] == 3
        assert "kvlink_store" in s.render_stats("prometheus")
        with pytest.raises(kvl.InvalidArgument, match="format"):
            s.render_stats("xml")
    assert s.closed
    with pytest.raises(kvl.StateError):
        s.exists("a")
    s.close()  # harmless twice


def test_store_full_and_too_large():
    with kvl.Store("mem:?capacity=4KiB") as s:
        with pytest.raises(kvl.OutOfRange):
            s.put("big", bytes(8192))


def test_readonly_destination_rejected():
    with kvl.Store() as s:
        s.put("k", b"abcd")
        with pytest.raises(kvl.InvalidArgument, match="read-only"):
            s.get_into("k", b"....")
        ro = np.zeros(4, np.uint8)
        ro.flags.writeable = False
        with pytest.raises(kvl.InvalidArgument, match="read-only"):
            s.get_into("k", ro)


def test_get_results_per_key():
    # kvl_store_get gives 0 or a code per key: whole objects of known size
    # read, absent keys None, a range beyond an object an error naming it.
    with kvl.Store() as s:
        s.put_many([("a", b"aaaa"), ("b", b"bbbbbbbb")])
        assert s.get_many(["a", "zz", "b"], [4, 4, 8]) == \
            [b"aaaa", None, b"bbbbbbbb"]
        with pytest.raises(kvl.OutOfRange, match="'a'"):
            s.get_many(["b", "a"], 8)
        buf = bytearray(3)
        assert s.get_into("b", buf, offset=5) == 3 and buf == b"bbb"
        with pytest.raises(kvl.InvalidArgument, match="2 keys, 1 sizes"):
            s.get_many(["a", "b"], [4])


def test_parse_size_and_policies():
    assert kvl.parse_size("0") == 0
    assert kvl.parse_size("4096") == 4096
    assert kvl.parse_size("8GiB") == kvl.parse_size("8g") == 8 << 30
    assert kvl.parse_size("3K") == 3 << 10
    assert kvl.parse_size("2TiB") == 2 << 40
    assert kvl.parse_size(str(2**64 - 1)) == 2**64 - 1
    for bad in ["", "lots", "8XB", "-1", str(2**64), "17EiB"]:
        with pytest.raises(kvl.ParseError, match="not a size"):
            kvl.parse_size(bad)
    with pytest.raises(kvl.ParseError, match="NUL"):
        kvl.parse_size("8\0G")
    with pytest.raises(TypeError, match="string"):
        kvl.parse_size(8 << 30)
    names = kvl.mem_policy_names()
    assert names[:3] == ("adaptive", "slru", "lru")  # the default first
    for name in names:  # every name is one mem: takes
        with kvl.Store(f"mem:?capacity=1MiB&policy={name}") as s:
            assert s.put("k", b"v")
    with pytest.raises(kvl.ParseError):
        kvl.Store("mem:?policy=nosuchpolicy")


def test_unknown_counts_are_none():
    # fault.stats_unknown=1: a store that cannot count, as a Redis
    # deployment with a node down.
    with kvl.Store("fault+mem:?fault.stats_unknown=1") as s:
        st = s.stats()
        assert st["objects"] is None and st["bytes"] is None
        assert st["capacity"] == 8 << 30
        j = s.stats_json()
        assert j["objects"] is None and j["bytes"] is None
        prom = s.render_stats("prometheus")
        assert "\nkvlink_store_objects NaN\n" in prom
        assert "18446744073709551615" not in prom + s.render_stats("json")


def test_pinning_without_a_device_is_noted():
    with kvl.Store("mem:?pinned=0&prealloc=1&capacity=1MiB") as s:
        assert "prealloc=1 has no effect" in s.note
        assert "prealloc=1" in s.stats_json()["note"]
    with kvl.Store("mem:?pinned=1") as s:
        if kvl.has_feature("cuda-device"):
            assert s.note == ""
        else:
            assert "pinned=1 has no effect" in s.note
    with kvl.Store("mem:") as s:
        assert s.note == ""
        assert "note" not in s.stats_json()
