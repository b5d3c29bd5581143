"""Stores by URI: opening errors with messages, objects by key (bytes,
pieces, numpy buffers), and stats."""

import json

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
    assert names[:2] == ("slru", "lru")  # the default first
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
