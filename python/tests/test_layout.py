# SPDX-License-Identifier: Apache-2.0
"""Layouts described from numpy arrays: geometry derived from shapes and
strides, the whole-pool helper in every dimension order, queries, keys, and
the errors a wrong description gets."""

import pytest

from conftest import (HEAD_DIM, HEADS, LAYERS, PAGE_SIZE, PAGES, kv_layout,
                      kv_pool, np)
import kvlink as kvl

PAGE_BYTES = PAGE_SIZE * HEADS * HEAD_DIM * 4


def addr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dims", ["LCP", "PLC", "CLP", "LPC"])
def test_kv_cache_dims(dims):
    shape = {"L": LAYERS, "C": 2, "P": PAGES}
    arr = np.zeros([shape[d] for d in dims] +
                   [PAGE_SIZE, HEADS, HEAD_DIM], np.float32)
    lay = kv_layout(arr, dims=dims)
    info = lay.pool_info("kv")
    assert info.layers == tuple(range(LAYERS))
    assert info.pages == PAGES
    size, header = lay.object_size("kv")
    assert size - header == LAYERS * 2 * PAGE_BYTES
    # Every piece is exactly where numpy puts that page.
    idx = {d: i for i, d in enumerate(dims)}
    for layer in (0, LAYERS - 1):
        for slot in (0, 5, PAGES - 1):
            pieces = lay.page_pieces("kv", slot, layer)
            assert len(pieces) == 2
            for comp, (a, n) in enumerate(pieces):
                sel = [0, 0, 0]
                sel[idx["L"]], sel[idx["C"]], sel[idx["P"]] = layer, comp, slot
                assert a == addr(arr[tuple(sel)]) and n == PAGE_BYTES
    assert len(lay.page_pieces("kv", 3)) == 2 * LAYERS
    off, ln = lay.layer_range("kv", 1)
    assert ln == 2 * PAGE_BYTES and off == header + 2 * PAGE_BYTES
    lay.close()


def test_add_array_per_layer_and_mla():
    k = [np.zeros((PAGES, PAGE_SIZE, HEADS, HEAD_DIM), np.float16)
         for _ in range(2)]
    v = [np.zeros_like(x) for x in k]
    latent = np.zeros((2, PAGES, PAGE_SIZE, 16), np.float16)
    lay = kvl.Layout("pytest/mix", PAGE_SIZE)
    kv = lay.add_pool("kv")
    for layer in range(2):
        lay.add_array(kv, "k", layer, k[layer])
        lay.add_array("kv", "v", layer, v[layer])
    mla = lay.add_kv_cache(latent, "LP", pool="mla")
    lay.finalize()
    assert (kv, mla) == (0, 1)
    assert lay.pool_id("mla") == 1
    assert lay.pool_info(mla).name == "mla"
    assert lay.page_pieces("mla", 2, 1) == [(addr(latent[1, 2]),
                                              PAGE_SIZE * 16 * 2)]
    assert [p.name for p in lay.pools] == ["kv", "mla"]
    assert lay.pool_count == 2


def test_token_indexed_pool():
    # [layers, 2, tokens, heads, dim]: a page is PAGE_SIZE consecutive tokens.
    arr = np.zeros((LAYERS, 2, PAGES * PAGE_SIZE, HEADS, HEAD_DIM), np.float32)
    lay = kvl.Layout("pytest/tok", PAGE_SIZE)
    lay.add_kv_cache(arr, "LCP", tokens=True)
    lay.finalize()
    assert lay.pool_pages("kv") == PAGES
    a, n = lay.page_pieces("kv", 3, 2)[1]
    assert a == addr(arr[2, 1, 3 * PAGE_SIZE]) and n == PAGE_BYTES
    bad = np.zeros((1, 2, PAGE_SIZE * 3 + 1, 4), np.float32)
    with pytest.raises(kvl.InvalidArgument, match="whole number"):
        kvl.Layout("pytest/tok", PAGE_SIZE).add_kv_cache(bad, tokens=True)


def test_trailing_pool_and_shard():
    lay = kvl.Layout("pytest/swa", 16, kvl.Shard(tp_rank=1, tp_size=2))
    swa = lay.add_pool("swa", "trailing", 2)
    lay.add_array(swa, "w", 1, np.zeros((8, 64), np.uint8))
    lay.add_array(swa, "w", 3, np.zeros((8, 64), np.uint8))
    lay.finalize()
    info = lay.pool_info("swa")
    assert info.policy == kvl.HitPolicy.TRAILING_PAGES and info.window == 2
    assert info.layers == (1, 3)
    assert lay.shard == kvl.Shard(1, 2, 0, 1, 0, 1)
    assert lay.page_size == 16


def test_keys_and_fingerprints():
    pool = kv_pool()
    a, b = kv_layout(pool), kv_layout(kv_pool(), tag="pytest/other")
    page = kvl.hash_pages(list(range(PAGE_SIZE)), PAGE_SIZE)[0]
    key = a.key("kv", page)
    fp = a.fingerprint("kv")
    assert key == f"kvl1:pytest/f32:{fp}:{page.hex()}:kv:tp0_cp0_pp0"
    assert len(a.fingerprint()) == 32
    assert b.fingerprint("kv") != fp  # another model tag never shares keys
    # A namespace (a seed as prior) hashes the page, and so keys it,
    # differently: its key is that of its own hash.
    seed = kvl.namespace_seed("t")
    seeded = kvl.hash_pages(list(range(PAGE_SIZE)), PAGE_SIZE, prior=seed)[0]
    assert seeded != page
    assert a.key("kv", seeded) == \
        f"kvl1:pytest/f32:{fp}:{seeded.hex()}:kv:tp0_cp0_pp0"
    assert a.key("kv", seeded) != key


def test_declared_format_joins_the_fingerprint():
    """add_pool(dtype=, memory_layout=): a different dtype or memory layout
    never shares keys; torch/numpy dtypes are named; bad names are refused
    before the pool is added."""
    def fp(**fmt):
        lay = kvl.Layout("pytest/fmt", PAGE_SIZE)
        p = lay.add_pool("kv", **fmt)
        lay.add_array(p, "k", 0, np.zeros((PAGES, 64), np.uint8))
        return lay.finalize().fingerprint("kv")

    plain = fp()
    assert fp(dtype="bfloat16") not in (plain, fp(dtype="float16"))
    assert fp(dtype="bfloat16", memory_layout="NHD") != \
        fp(dtype="bfloat16", memory_layout="HND")
    assert fp(dtype=np.float16) == fp(dtype="float16")
    assert fp(dtype=np.dtype("float16")) == fp(dtype="float16")
    lay = kvl.Layout("pytest/fmt", PAGE_SIZE)
    with pytest.raises(kvl.InvalidArgument, match="dtype must be"):
        lay.add_pool("kv", dtype="bf 16")
    with pytest.raises(kvl.InvalidArgument, match="memory_layout must be"):
        lay.add_pool("kv", dtype="bf16", memory_layout="N/HD")
    with pytest.raises(kvl.InvalidArgument, match="needs a dtype"):
        lay.add_pool("kv", memory_layout="NHD")
    with pytest.raises(TypeError, match="dtype"):
        lay.add_pool("kv", dtype=3.5)
    assert lay.add_pool("kv", dtype="bf16") == 0  # nothing was added


def test_raw_buffers():
    mem = np.zeros(PAGES * 128, np.uint8)
    base = addr(mem)
    lay = kvl.Layout("pytest/raw", PAGE_SIZE)
    p = lay.add_pool("kv")
    lay.add_buffer(p, "k", 0, base, 128, 64, PAGES, keep=mem)
    lay.add_buffer(p, "v", 0, base + 64, 128, 64, PAGES)  # interleaved
    lay.finalize()
    assert lay.page_pieces(p, 1, 0) == [(base + 128, 64), (base + 192, 64)]


def test_errors_carry_messages():
    pool = kv_pool()
    lay = kvl.Layout("pytest/err", PAGE_SIZE)
    with pytest.raises(kvl.StateError):
        lay.pool_info(0)  # not finalized (C: KVL_ESTATE)
    kv = lay.add_pool("kv")
    with pytest.raises(kvl.AlreadyExists, match="kv"):
        lay.add_pool("kv")
    with pytest.raises(kvl.InvalidArgument, match="hit policy"):
        lay.add_pool("x", "sometimes")
    with pytest.raises(kvl.InvalidArgument, match="window"):
        lay.add_pool("swa", "trailing", 0)
    with pytest.raises(kvl.NotFound):
        lay.add_array(7, "k", 0, pool[0, 0])
    lay.add_array(kv, "k", 0, pool[0, 0])
    with pytest.raises(kvl.AlreadyExists, match="already described"):
        lay.add_array(kv, "k", 0, pool[0, 0])
    with pytest.raises(kvl.InvalidArgument, match="num_pages"):
        lay.add_array(kv, "v", 0, pool[0, 1, :5])
    with pytest.raises(kvl.InvalidArgument, match="contiguous"):
        lay.add_array(kv, "v", 0, pool[0, 1, :, :, :, :4])
    raw = np.zeros(PAGES * 64 + 8, np.uint8)
    with pytest.raises(kvl.InvalidArgument, match="multiples of 8") as ei:
        lay.add_buffer(kv, "v", 0, addr(raw) + 3, 64, 64, PAGES)
    assert ei.value.code == -1 and ei.value.name == "KVL_EINVAL"
    assert str(ei.value).startswith("KVL_EINVAL: add_buffer kv/v layer 0")
    lay.add_array(kv, "v", 0, pool[0, 0, :, :2])  # overlaps "k"
    with pytest.raises(kvl.InvalidArgument, match="overlap"):
        lay.finalize()
    assert not lay.finalized
    with pytest.raises(kvl.InvalidArgument, match="dims"):
        kvl.Layout("pytest/err", 4).add_kv_cache(pool, "LXP")
    with pytest.raises(kvl.InvalidArgument):
        kvl.Layout("bad tag!", 4)
    with pytest.raises(kvl.InvalidArgument):
        kvl.Layout("ok", 0)
    with pytest.raises(TypeError):
        kvl.Layout("ok", 4).add_array(0, "k", 0, object())


def test_layout_kept_alive_and_closed(store):
    pool = kv_pool()
    lay = kv_layout(pool)
    lk = kvl.Linker(lay, store)
    with pytest.raises(kvl.StateError, match="linker"):
        lay.close()
    with pytest.raises(kvl.StateError, match="linker"):
        store.close()
    lk.close()
    lay.close()
    lay.close()  # harmless twice
    assert lay.closed
    with pytest.raises(kvl.StateError, match="closed"):
        lay.pool_info(0)
