# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the kvlink binding tests.

The tests exercise the package of this source tree (python/kvlink), not an
installed copy, against the library that $KVLINK_LIBRARY names (ctest sets it
to the freshly built libkvlink.so) or that the package finds on its own.
They need numpy; without it the whole suite is skipped.
"""

import os
import subprocess
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


# ------------------------------------------------- the engine adapters' tests

def _cuda_ok():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and kvl.has_feature("cuda")


#: Where the adapters' engine-shaped pools live: numpy arrays on the CPU,
#: and CUDA tensors (the engines' real case, with stream-ordered waits)
#: where torch has a GPU and kvlink has CUDA.
DEVICES = ["cpu"] + (["cuda"] if _cuda_ok() else [])


@pytest.fixture(params=DEVICES)
def dev(request):
    return request.param


def check_adapter_import(module, cls, engine, base):
    """A fresh interpreter imports kvlink.<module> without `engine` (and
    without torch), and kvlink.<module>.<cls> then names the engine's
    `base` class it needs."""
    code = (f"import sys\n"
            f"import kvlink.{module} as m\n"
            f"assert {engine!r} not in sys.modules and 'torch' not in "
            f"sys.modules\n"
            f"try:\n"
            f"    m.{cls}\n"
            f"except ImportError as e:\n"
            f"    assert {base!r} in str(e), e\n"
            f"else:\n"
            f"    raise SystemExit('{cls} built without {engine}')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in sys.path if p and os.path.isdir(os.path.join(p, "kvlink")))
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
