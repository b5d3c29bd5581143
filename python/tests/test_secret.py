# SPDX-License-Identifier: Apache-2.0
"""Store secrets from Python: Store(uri) passes secret_file= through to
kvlink; a linker over a store with the writer's secret loads its pages, a
store with another secret (or none) never reports them valid, and a bad
secret file fails the open with a message naming the path but not the
secret. The fault store around the embedded one holds its objects per
handle, so objects are handed from the writer's store to the reader's
with raw get and put (what a shared Redis does by itself)."""

import numpy as np
import pytest

from conftest import PAGE_SIZE, kv_layout, kv_pool, tokens
import kvlink as kvl

T = 10.0
SECRET_A = b"python engine A: 8d969eef6ecad3c29a3a629280e686cf"
SECRET_B = b"python engine B: 0c1ef7ba8e5b2f3cd6b3b2b7d1e4a9f0"


@pytest.fixture
def secrets(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(SECRET_A + b"\n")
    b.write_bytes(SECRET_B)
    return str(a), str(b)


def uri(secret=None):
    u = "fault+mem:?capacity=64MiB"
    return u + (f"&secret_file={secret}" if secret else "")


def hand_over(src, dst, layout, pages):
    size, _ = layout.object_size(0)
    for p in pages:
        key = layout.key(0, p)
        dst.remove(key)
        assert dst.put(key, src.get(key, size))


def write_then_load(writer_uri, reader_uri):
    """Offloads 6 pages through a store opened with writer_uri, hands them
    to one opened with reader_uri and loads them there: the completion and
    the pools."""
    src_pool, dst_pool = kv_pool(seed=5), kv_pool(fill=-1.0)
    with kvl.Store(writer_uri) as w, kvl.Store(reader_uri) as r, \
            kv_layout(src_pool) as ls, kv_layout(dst_pool) as ld, \
            kvl.Linker(ls, w) as src, kvl.Linker(ld, r) as dst:
        pages = kvl.hash_pages(tokens(6, seed=5), PAGE_SIZE)
        src.offload(1, pages, range(6))
        src.flush(timeout=T)
        assert src.poll_until([1], T)[1].ok
        hand_over(w, r, ls, pages)
        dst.load(2, pages, range(10, 16))
        batch = dst.start()
        for layer in range(dst.layers):
            try:
                dst.wait(batch, layer, timeout=T)
            except kvl.Timeout:
                raise
            except kvl.KvlinkError:
                pass
        return dst.poll_until([2], T)[2], src_pool, dst_pool


def test_feature():
    assert kvl.has_feature("mac")


def test_same_secret_loads(secrets):
    a, _ = secrets
    c, src_pool, dst_pool = write_then_load(uri(a), uri(a))
    assert c.ok and c.valid_pages == 6
    assert np.array_equal(dst_pool[:, :, 10:16], src_pool[:, :, 0:6])


@pytest.mark.parametrize("reader", ["other", "none"])
def test_mismatched_secret_never_loads(secrets, reader):
    a, b = secrets
    c, _, dst_pool = write_then_load(
        uri(a), uri(b if reader == "other" else None))
    assert not c.ok and c.valid_pages == 0
    assert c.status == kvl.ERRORS["KVL_ECORRUPT"]


def test_unkeyed_objects_refused_by_a_keyed_reader(secrets):
    a, _ = secrets
    c, _, _ = write_then_load(uri(None), uri(a))
    assert not c.ok and c.valid_pages == 0


def test_bad_secret_files(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(b"TOPSECRET")
    with pytest.raises(kvl.InvalidArgument) as ei:
        kvl.Store(uri(str(short)))
    assert str(short) in str(ei.value) and "TOPSECRET" not in str(ei.value)
    with pytest.raises(kvl.KvlinkError) as ei:
        kvl.Store(uri(str(tmp_path / "missing")))
    assert ei.value.code == kvl.ERRORS["KVL_EIO"]
    assert "missing" in str(ei.value)
