# SPDX-License-Identifier: Apache-2.0
"""The C functions the Python API does not wrap, called through _lib's
prototypes as tools would: restorable sets and bitmaps, and synchronous
page I/O (kvl_pages_exists / put / get). Argument order matters here
(n_pools before n_pages, slots before n), which types alone cannot tell."""

import ctypes

import pytest

from conftest import PAGE_SIZE, kv_layout, kv_pool, np, tokens
import kvlink as kvl
from kvlink import _lib
from kvlink._lib import kvl_policy, lib

ALL = _lib.KVL_HIT_ALL_PAGES
TRAILING = _lib.KVL_HIT_TRAILING_PAGES


def restorable(pools, n_pages, n_words=None):
    """(rc, set of restorable prefixes) for pools [(kind, window, present
    flags or None)]."""
    n = len(pools)
    policies = (kvl_policy * max(n, 1))(*[kvl_policy(k, w)
                                          for k, w, _ in pools])
    rows = [(ctypes.c_uint8 * max(n_pages, 1))(*p) if p is not None
            else None for _, _, p in pools]
    present = (ctypes.POINTER(ctypes.c_uint8) * max(n, 1))(
        *[ctypes.cast(r, ctypes.POINTER(ctypes.c_uint8)) if r is not None
          else None for r in rows])
    words = n_pages // 64 + 1 if n_words is None else n_words
    bits = (ctypes.c_uint64 * max(words, 1))()
    rc = lib.kvl_restorable_set(policies, present, n, n_pages, bits, words)
    got = {p for p in range(n_pages + 1)
           if p // 64 < words and bits[p // 64] >> (p % 64) & 1}
    return rc, got, bits, words


def test_restorable_set_and_bitmap_max():
    have = [1, 1, 0, 1, 1]
    rc, got, bits, words = restorable([(ALL, 0, have)], 5)
    assert rc == 0 and got == {0, 1, 2}
    assert lib.kvl_bitmap_max(bits, words) == 2
    rc, got, _, _ = restorable([(TRAILING, 1, have)], 5)
    assert rc == 0 and got == {0, 1, 2, 4, 5}
    rc, got, bits, words = restorable([(ALL, 0, have),
                                       (TRAILING, 1, have)], 5)
    assert rc == 0 and got == {0, 1, 2}
    # A pool left out (NULL present) does not constrain the set.
    rc, got, bits, words = restorable([(ALL, 0, None),
                                       (TRAILING, 2, [1] * 70)], 70)
    assert rc == 0 and got == set(range(71)) and words == 2
    assert lib.kvl_bitmap_max(bits, words) == 70
    rc, got, _, _ = restorable([], 3)
    assert rc == 0 and got == {0, 1, 2, 3}


def test_restorable_set_errors():
    rc, _, _, _ = restorable([(ALL, 0, [1] * 64)], 64, n_words=1)
    assert rc == kvl.ERRORS["KVL_ERANGE"]  # 64 pages need 2 words
    rc, _, _, _ = restorable([(TRAILING, 0, [1])], 1)
    assert rc == kvl.ERRORS["KVL_EINVAL"]  # window 0


def test_page_io(store):
    src_pool, dst_pool = kv_pool(seed=21), kv_pool()
    src, dst = kv_layout(src_pool), kv_layout(dst_pool)
    pages = kvl.hash_pages(tokens(3, seed=21), PAGE_SIZE, as_array=True)
    hashes = (_lib.kvl_hash * 3).from_buffer_copy(pages.tobytes())
    res = (ctypes.c_int * 3)()

    def call(fn, *args):
        rc = fn(store._handle, *args)
        assert rc == 0, (rc, lib.kvl_store_errmsg(store._handle))
        return list(res)

    assert call(lib.kvl_pages_exists, src._handle, 0, hashes, 3, res) == \
        [0, 0, 0]
    slots = _lib.size_t_array([4, 5, 6])
    assert call(lib.kvl_pages_put, src._handle, 0, hashes, slots, 3,
                res) == [_lib.KVL_PUT_STORED] * 3
    assert call(lib.kvl_pages_put, src._handle, 0, hashes, slots, 3,
                res) == [_lib.KVL_PUT_PRESENT] * 3
    assert call(lib.kvl_pages_exists, dst._handle, 0, hashes, 3, res) == \
        [1, 1, 1]
    into = _lib.size_t_array([0, 1, 2])
    assert call(lib.kvl_pages_get, dst._handle, 0, hashes, into, 3,
                _lib.KVL_ALL_LAYERS, res) == [0, 0, 0]
    assert np.array_equal(dst_pool[:, :, 0:3], src_pool[:, :, 4:7])
    # One layer only; an absent page.
    dst_pool.fill(0)
    store.remove(src.key("kv", bytes(pages[2])))
    assert call(lib.kvl_pages_get, dst._handle, 0, hashes, into, 3, 1,
                res) == [0, 0, kvl.ERRORS["KVL_ENOTFOUND"]]
    assert np.array_equal(dst_pool[1, :, 0:2], src_pool[1, :, 4:6])
    assert not dst_pool[0].any() and not dst_pool[2:].any()
    src.close()
    dst.close()


@pytest.mark.parametrize("fn", ["kvl_pages_exists", "kvl_restorable_set"])
def test_null_arrays_refused(fn, store):
    if fn == "kvl_pages_exists":
        lay = kv_layout(kv_pool())
        rc = lib.kvl_pages_exists(store._handle, lay._handle, 0, None, 1,
                                  None)
        lay.close()
    else:
        rc = lib.kvl_restorable_set(None, None, 1, 1, None, 1)
    assert rc == kvl.ERRORS["KVL_EINVAL"]
