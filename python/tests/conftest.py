# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the kvlink binding tests.

The tests exercise the package of this source tree (python/kvlink), not an
installed copy, against the library that $KVLINK_LIBRARY names (ctest sets it
to the freshly built libkvlink.so) or that the package finds on its own.
They need numpy; without it the whole suite is skipped.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

np = pytest.importorskip("numpy")

import kvlink as kvl  # noqa: E402

# Geometry of the test pools: small, several layers and pages.
LAYERS = 4
PAGES = 32          # slots per pool
PAGE_SIZE = 4       # tokens per page
HEADS = 2
HEAD_DIM = 8


def kv_pool(fill=0.0, dtype=np.float32, seed=None):
    """A paged KV pool [layers, 2, pages, page_size, heads, head_dim]."""
    shape = (LAYERS, 2, PAGES, PAGE_SIZE, HEADS, HEAD_DIM)
    if seed is None:
        return np.full(shape, fill, dtype=dtype)
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def kv_layout(pool, tag="pytest/f32", page_size=PAGE_SIZE, dims="LCP",
              shard=None):
    lay = kvl.Layout(tag, page_size, shard=shard)
    lay.add_kv_cache(pool, dims)
    return lay.finalize()


def tokens(n_pages, seed=0, page_size=PAGE_SIZE):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 32000, size=n_pages * page_size).tolist()


@pytest.fixture
def store():
    s = kvl.Store("mem:?capacity=64MiB")
    yield s
    for u in list(s._users):
        u.close()
    s.close()


@pytest.fixture
def engines(store):
    """Two engines (source, destination) with their own pools, layouts and
    linkers over one store: a source pool filled with random values and a
    zeroed destination pool."""
    class Engine:
        pass
    out = []
    for seed in (1, None):
        e = Engine()
        e.pool = kv_pool(seed=seed)
        e.layout = kv_layout(e.pool)
        e.lk = kvl.Linker(e.layout, store)
        out.append(e)
    yield out
    for e in out:
        e.lk.close()
        e.layout.close()
