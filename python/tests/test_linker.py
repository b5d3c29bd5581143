# SPDX-License-Identifier: Apache-2.0
"""The linker from Python, on the CPU with numpy pools and the embedded
store: offload → lookup → layer-wise load with per-layer waits → equal bytes;
partial prefixes; namespaces (different priors never share pages); cancel;
argument errors with kvlink's messages; exactly-once completions; shutdown;
several pools; rank all-reduce; stats; and the fault-injection store,
through which no wrong byte is ever reported valid."""

import json
import threading

import pytest

from conftest import (LAYERS, PAGE_SIZE, PAGES, kv_layout, kv_pool, np,
                      tokens)
import kvlink as kvl

T = 10.0  # seconds: generous limits, never reached when things work


def offload_sync(lk, rid, pages, slots):
    lk.offload(rid, pages, slots)
    lk.flush(timeout=T)
    return lk.poll_until([rid], T)[rid]


def load_sync(lk, rid, pages, slots):
    """Loads as one batch, waiting layer by layer; returns (completion,
    per-layer wait errors)."""
    lk.load(rid, pages, slots)
    batch = lk.start()
    errs = []
    for layer in range(lk.layers):
        try:
            lk.wait(batch, layer, timeout=T)
            errs.append(None)
        except kvl.Timeout:
            raise
        except kvl.KvlinkError as e:
            errs.append(e)
    return lk.poll_until([rid], T)[rid], errs


def test_full_round_trip_layer_by_layer(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(10), PAGE_SIZE)
    c = offload_sync(src.lk, 1, pages, list(range(10)))
    assert c == (1, kvl.RequestKind.OFFLOAD, 0, 10, 10) and c.ok
    assert dst.lk.lookup(pages) == 10
    assert dst.lk.layers == LAYERS

    slots = list(range(20, 30))
    dst.lk.load(2, pages, slots)
    batch = dst.lk.start()
    for layer in range(LAYERS):
        dst.lk.wait(batch, layer, timeout=T)
        # Layer `layer` (and the ones before) are in place now.
        assert np.array_equal(dst.pool[layer, :, 20:30],
                              src.pool[layer, :, 0:10])
    c = dst.lk.poll_until([2], T)[2]
    assert c.kind == kvl.RequestKind.LOAD and c.ok and c.valid_pages == 10
    assert np.array_equal(dst.pool[:, :, 20:30], src.pool[:, :, 0:10])
    assert not dst.pool[:, :, :20].any() and not dst.pool[:, :, 30:].any()
    assert dst.lk.poll() == []  # exactly once


def test_partial_prefix(engines, store):
    src, dst = engines
    shared = tokens(6, seed=5)
    a = kvl.hash_pages(shared, PAGE_SIZE)
    offload_sync(src.lk, 1, a[:4], [0, 1, 2, 3])
    # A new request sharing 4 pages, then diverging.
    b = kvl.hash_pages(shared[:4 * PAGE_SIZE] + tokens(3, seed=6), PAGE_SIZE)
    assert b[:4] == a[:4] and b[4] != a[4]
    assert dst.lk.lookup(b) == 4
    assert dst.lk.lookup(a) == 4
    assert dst.lk.lookup(a[:2]) == 2
    assert dst.lk.lookup([]) == 0
    # One token different in page k: only k pages match.
    for k in range(4):
        t = list(shared)
        t[k * PAGE_SIZE + 1] += 1
        assert dst.lk.lookup(kvl.hash_pages(t, PAGE_SIZE)) == k
    # A hole ends the prefix (ALL_PAGES).
    store.remove(src.layout.key("kv", a[1]))
    assert dst.lk.lookup(a) == 1
    # Loading past the hole: the page is missing, the prefix before it is
    # valid.
    c, errs = load_sync(dst.lk, 2, a[:4], [8, 9, 10, 11])
    assert c.status == kvl.ERRORS["KVL_ENOTFOUND"] and c.valid_pages == 1
    assert isinstance(c.error, kvl.NotFound)
    assert np.array_equal(dst.pool[:, :, 8], src.pool[:, :, 0])


def test_namespace_isolation(engines):
    """Tenants are kept apart by their pages' hashes alone: the same tokens
    hashed with different priors (namespace seeds) never share a page."""
    src, dst = engines
    toks = tokens(5, seed=2)
    na, nb = kvl.namespace_seed("tenant-a"), kvl.namespace_seed("tenant-b")
    pa = kvl.hash_pages(toks, PAGE_SIZE, prior=na)
    pb = kvl.hash_pages(toks, PAGE_SIZE, prior=nb)
    bare = kvl.hash_pages(toks, PAGE_SIZE)
    assert not (set(pa) & set(pb)) and not (set(pa) & set(bare))
    assert offload_sync(src.lk, 1, pa, range(5)).ok
    assert dst.lk.lookup(pa) == 5
    assert dst.lk.lookup(pb) == 0
    assert dst.lk.lookup(bare) == 0
    c, errs = load_sync(dst.lk, 2, pb, range(5))
    assert c.status == kvl.ERRORS["KVL_ENOTFOUND"] and c.valid_pages == 0
    assert isinstance(errs[0], kvl.NotFound)
    assert "failed at layer 0" in str(errs[0])
    assert not dst.pool.any()
    c, errs = load_sync(dst.lk, 3, pa, range(5))
    assert c.ok and errs == [None] * LAYERS
    assert np.array_equal(dst.pool[:, :, :5], src.pool[:, :, :5])
    # A seed of other salts (or of the same salts in another order) is
    # another namespace, equally isolated.
    for seed in (kvl.namespace_seed("tenant-a", "lora-1"),
                 kvl.namespace_seed("lora-1", "tenant-a")):
        assert dst.lk.lookup(kvl.hash_pages(toks, PAGE_SIZE,
                                            prior=seed)) == 0


def test_cancel(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(3, seed=3), PAGE_SIZE)
    offload_sync(src.lk, 1, pages, [0, 1, 2])
    dst.lk.load(10, pages, [0, 1, 2])
    dst.lk.load(11, pages, [3, 4, 5])
    assert dst.lk.cancel(10) is True
    with pytest.raises(kvl.NotFound, match="10"):
        dst.lk.cancel(10)
    batch = dst.lk.start()
    dst.lk.wait(batch, LAYERS - 1, timeout=T)
    got = dst.lk.poll_until([10, 11], T)
    assert got[10].status == kvl.ERRORS["KVL_ECANCELED"]
    assert got[10].valid_pages == 0 and got[10].status_name == "KVL_ECANCELED"
    assert got[11].ok
    assert not dst.pool[:, :, 0:3].any()
    assert np.array_equal(dst.pool[:, :, 3:6], src.pool[:, :, 0:3])
    # Started (and finished) loads are no longer cancelable.
    with pytest.raises(kvl.NotFound):
        dst.lk.cancel(11)


def test_argument_errors(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(3, seed=4), PAGE_SIZE)
    with pytest.raises(kvl.OutOfRange) as ei:
        dst.lk.load(1, pages, [0, 1, PAGES])
    assert f"slot {PAGES} out of range" in str(ei.value)
    assert ei.value.code == kvl.ERRORS["KVL_ERANGE"]
    dst.lk.load(2, pages, [0, 1, 2])
    with pytest.raises(kvl.AlreadyExists, match="2"):
        dst.lk.load(2, pages, [3, 4, 5])
    src.lk.offload(3, pages, [0, 1, 2])
    with pytest.raises(kvl.InvalidArgument, match="2 slots for 3 pages"):
        src.lk.offload(4, pages, [0, 1])
    with pytest.raises(kvl.InvalidArgument, match="bad slot"):
        src.lk.offload(4, pages, [0, 1, -7])
    with pytest.raises(kvl.InvalidArgument, match="no page has a slot"):
        src.lk.offload(4, pages, [None, None, kvl.NO_SLOT])
    with pytest.raises(kvl.InvalidArgument, match="32 bytes"):
        dst.lk.lookup([b"x" * 31])
    with pytest.raises(kvl.OutOfRange, match="layer"):
        dst.lk.wait(0, LAYERS)
    with pytest.raises(kvl.NotFound, match="batch"):
        dst.lk.wait(12345, 0)
    with pytest.raises(kvl.InvalidArgument, match="finalized"):
        kvl.Linker(kvl.Layout("unfinalized", 4), dst.lk.store)
    with pytest.raises(TypeError, match="layout must be a kvlink.Layout"):
        kvl.Linker(dst.lk.store, dst.lk.layout)  # C's order: store first
    with pytest.raises(TypeError, match="store must be a kvlink.Store"):
        kvl.Linker(dst.lk.layout, "mem:")
    src.lk.flush(timeout=T)
    b = dst.lk.start()
    dst.lk.wait(b, LAYERS - 1, timeout=T)
    got = dst.lk.poll_until([2], T)
    assert set(got) >= {2}


def test_numpy_slots_and_hash_arrays(engines):
    src, dst = engines
    pages = kvl.hash_pages(np.array(tokens(4, seed=9)), PAGE_SIZE,
                           as_array=True)
    assert offload_sync(src.lk, 1, pages, np.arange(4)).ok
    assert dst.lk.lookup(pages) == 4
    slots = np.array([7, -1, 9, 10])  # page 1 not loaded
    c, _ = load_sync(dst.lk, 2, pages, slots)
    assert c.ok
    assert np.array_equal(dst.pool[:, :, [7, 9, 10]],
                          src.pool[:, :, [0, 2, 3]])
    assert not dst.pool[:, :, 8].any()


def test_timeouts(engines):
    src, dst = engines
    b = dst.lk.start()  # an empty batch: complete once the loader saw it
    dst.lk.wait(b, LAYERS - 1, timeout=T)
    assert dst.lk.poll(timeout=0.01) == []  # nothing to report
    src.lk.flush(timeout=0)  # nothing pending: returns at once
    # A batch that cannot complete in time: the store answers slowly.
    with kvl.Store("fault+mem:?capacity=1MiB&fault.latency_ms=300") as st, \
            kvl.Linker(src.layout, st) as lk:
        pages = kvl.hash_pages(tokens(1), PAGE_SIZE)
        lk.load(1, pages, [0])
        b = lk.start()
        with pytest.raises(kvl.Timeout, match="not complete") as ei:
            lk.wait(b, 0, timeout=0.01)
        assert isinstance(ei.value, TimeoutError)
        with pytest.raises(kvl.NotFound, match="failed at layer 0"):
            lk.wait(b, LAYERS - 1, timeout=T)  # nothing was stored
        c = lk.poll_until([1], T)[1]
        assert c.status == kvl.ERRORS["KVL_ENOTFOUND"]


def test_shutdown(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(2, seed=8), PAGE_SIZE)
    offload_sync(src.lk, 1, pages, [0, 1])
    dst.lk.load(5, pages, [0, 1])
    dst.lk.shutdown()
    dst.lk.shutdown()  # idempotent
    with pytest.raises(kvl.Closed, match="shutting down"):
        dst.lk.load(6, pages, [2, 3])
    with pytest.raises(kvl.Closed):
        dst.lk.start()
    c = dst.lk.poll_until([5], T)[5]
    assert c.status == kvl.ERRORS["KVL_ECANCELED"]
    dst.lk.close()
    dst.lk.close()
    with pytest.raises(kvl.StateError, match="closed"):
        dst.lk.lookup(pages)


def test_context_managers():
    pool = kv_pool(seed=3)
    with kvl.Store() as st, kv_layout(pool) as lay, kvl.Linker(lay, st) as lk:
        pages = kvl.hash_pages(tokens(2), PAGE_SIZE)
        assert offload_sync(lk, 1, pages, [0, 1]).ok
        assert lk.lookup(pages) == 2
    assert lk.closed and lay.closed and st.closed


def test_stats_are_json(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(3, seed=11), PAGE_SIZE)
    offload_sync(src.lk, 1, pages, [0, 1, 2])
    dst.lk.lookup(pages)
    load_sync(dst.lk, 2, pages, [0, 1, 2])
    j = json.loads(dst.lk.render_stats("json"))
    assert j == dst.lk.stats_json() or j["linker"]["lookups"] == 1
    assert j["linker"]["lookups"] == 1
    assert j["linker"]["loaded_pages"] == 3
    assert j["linker"]["hit_pages"] == 3
    assert j["store"]["objects"] == 3
    assert j["latency"]["batch"]["count"] == 1
    js = json.loads(src.lk.render_stats())
    assert js["linker"]["offloaded_pages"] == 3
    prom = dst.lk.render_stats("prometheus")
    assert "kvlink_lookups_total 1" in prom


def test_several_pools(store):
    """kv (ALL_PAGES) and swa (TRAILING_PAGES(2), layers 1 and 3): slots
    by pool name; swa only for the trailing pages."""
    def engine(seed):
        kv = kv_pool(seed=seed)
        rng = np.random.default_rng(seed)
        swa = (rng.integers(0, 255, (2, PAGES, 64), dtype=np.uint8)
               if seed else np.zeros((2, PAGES, 64), np.uint8))
        lay = kvl.Layout("pytest/pools", PAGE_SIZE)
        lay.add_kv_cache(kv, "LCP")
        p = lay.add_pool("swa", kvl.HitPolicy.TRAILING_PAGES, 2)
        lay.add_array(p, "w", 1, swa[0])
        lay.add_array(p, "w", 3, swa[1])
        return kv, swa, kvl.Linker(lay.finalize(), store)

    skv, sswa, src = engine(1)
    dkv, dswa, dst = engine(None)
    pages = kvl.hash_pages(tokens(6, seed=12), PAGE_SIZE)
    c = offload_sync(src, 1, pages, {"kv": range(6), "swa": range(6)})
    assert c.ok
    assert dst.lookup(pages) == 6
    # swa asked for pages 3, 4 only: its window of 2 allows p = 5.
    assert dst.lookup(pages, pool_pages={"swa": [0, 0, 0, 1, 1, 0]}) == 5
    assert dst.lookup(pages, pool_pages=[None, [0] * 6]) == 6
    store.remove(src.layout.key("swa", pages[5]))
    assert dst.lookup(pages) == 5  # p = 6 needs swa pages 4 and 5
    store.remove(src.layout.key("swa", pages[3]))
    assert dst.lookup(pages) == 3  # p = 5, 4 need page 3; p = 3 needs 1, 2
    # This rank's whole set, with its holes: swa lacks pages 0, 3 and 5.
    store.remove(src.layout.key("swa", pages[0]))
    assert dst.lookup_set(pages) == {0, 3}
    assert dst.lookup_set(pages, pool_pages={"swa": [0, 1, 1, 0, 1, 0]}) \
        == {0, 3}
    assert dst.lookup_set(pages[:2]) == {0}
    assert dst.lookup_set([]) == {0}
    # Load 3 pages: kv for all, swa for the last two only.
    c, _ = load_sync(dst, 2, pages[:3],
                     [list(range(10, 13)), [None, 21, 22]])
    assert c.ok
    assert np.array_equal(dkv[:, :, 10:13], skv[:, :, 0:3])
    assert np.array_equal(dswa[:, 21:23], sswa[:, 1:3])
    assert not dswa[:, 20].any()
    with pytest.raises(kvl.InvalidArgument, match="2 pools"):
        dst.load(3, pages, list(range(6)))
    src.close()
    dst.close()


def test_lookup_set_never_calls_the_allreduce(store):
    """lookup_set is this rank's set: the all-reduce callback is not
    called; a failing store raises instead of reading as a miss."""
    calls = []

    def allreduce(bits):
        calls.append(1)

    lay = kv_layout(kv_pool(seed=3))
    fault = kvl.Store("fault+mem:")
    lk = kvl.Linker(lay, fault, allreduce=allreduce)
    pages = kvl.hash_pages(tokens(4, seed=5), PAGE_SIZE)
    assert offload_sync(lk, 1, pages[:3], range(3)).ok
    assert lk.lookup_set(pages) == {0, 1, 2, 3}
    assert calls == []
    assert lk.lookup(pages) == 3 and calls == [1]
    with pytest.raises(kvl.InvalidArgument, match="flags for 4 pages"):
        lk.lookup_set(pages, pool_pages=[[1, 0]])
    lk.close()
    with kvl.Linker(lay, kvl.Store("fault+mem:?fault.down=1")) as down:
        with pytest.raises(kvl.StoreIOError, match="lookup_set"):
            down.lookup_set(pages)


def test_allreduce_callback_and_rank_group(store):
    pool = kv_pool(seed=1)
    lay = kv_layout(pool)
    pages = kvl.hash_pages(tokens(8, seed=13), PAGE_SIZE)
    with kvl.Linker(lay, store) as lk:
        offload_sync(lk, 1, pages, range(8))
    # A peer rank that has only the first 5 pages: AND with its set.
    calls = []

    def peer_has_5(bits):
        calls.append(len(bits))
        mask = sum(1 << p for p in range(6))  # prefixes 0..5
        bits[0] &= np.uint64(mask)

    with kvl.Linker(lay, store, allreduce=peer_has_5) as lk:
        assert lk.lookup(pages) == 5
        assert calls == [1]

    def broken(bits):
        raise RuntimeError("process group is gone")

    with kvl.Linker(lay, store, allreduce=broken) as lk:
        with pytest.raises(kvl.KvlinkError, match="process group is gone"):
            lk.lookup(pages)

    # Two ranks as threads, sharing a RankGroup.
    group = kvl.RankGroup(2, timeout=T)
    layouts = []
    for r in range(2):
        lr = kvl.Layout("pytest/tp", PAGE_SIZE, kvl.Shard(tp_rank=r,
                                                          tp_size=2))
        lr.add_kv_cache(kv_pool(seed=r + 1))
        layouts.append(lr.finalize())
    lks = [kvl.Linker(lr, store, allreduce=group) for lr in layouts]
    offload_sync(lks[0], 1, pages, range(8))
    offload_sync(lks[1], 2, pages[:6], range(6))
    out = [None, None]

    def rank(r):
        out[r] = lks[r].lookup(pages)

    ts = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(T) for t in ts]
    assert out == [6, 6]
    with pytest.raises(kvl.StateError, match="linker"):
        group.close()
    for lk in lks:
        lk.close()
    group.close()
    group.close()  # harmless twice
    assert group.closed


def test_cuda_calls(engines):
    """Stream waits and event offloads: with host pools (any build) a
    stream wait waits on the CPU as wait() does; events need a pool on a
    GPU in any build; a GPU pool needs a usable GPU."""
    src, dst = engines
    b = dst.lk.start()
    for layer in range(dst.lk.layers):
        dst.lk.wait_stream(b, layer, stream=0)  # complete: returns
    with pytest.raises(TypeError, match="stream"):
        dst.lk.wait_stream(b, 0, stream="default")
    pages = kvl.hash_pages(tokens(1), PAGE_SIZE)
    with pytest.raises(kvl.NotSupported, match="CUDA"):
        src.lk.offload(1, pages, [0], event=1234)
    with pytest.raises(TypeError, match="event"):
        src.lk.offload(1, pages, [0], event="after prefill")
    src.lk.offload(2, pages, [0], event=None)  # no event: written already
    with pytest.raises(kvl.NotSupported, match="CUDA"):
        dst.lk.start(event=1234)
    with pytest.raises(TypeError, match="event"):
        dst.lk.start(event="after prefill")
    src.lk.flush(timeout=T)
    assert src.lk.poll_until([2], T)[2].ok
    # A pool that says it is on GPU 0: refused unless a GPU is usable.
    lay = kvl.Layout("pytest/gpu", PAGE_SIZE)
    p = lay.add_pool("kv")
    lay.add_buffer(p, "k", 0, 1 << 20, 256, 256, 4, kvl.MemKind.CUDA, 0)
    lay.finalize()
    try:
        kvl.Linker(lay, dst.lk.store).close()  # never used: no transfer
    except kvl.NotSupported as e:
        assert "CUDA" in str(e)


def test_exactly_once_with_threads(engines):
    src, dst = engines
    pages = kvl.hash_pages(tokens(8, seed=14), PAGE_SIZE)
    offload_sync(src.lk, 1, pages, range(8))
    accepted, lock = [], threading.Lock()

    def engine(t):
        for i in range(40):
            rid = (t << 16) | i
            try:
                if i % 3 == 2:
                    src.lk.offload(rid, pages[:4], range(4))
                else:
                    dst.lk.load(rid, pages[:4], range(4 * t, 4 * t + 4))
            except kvl.Full:
                continue
            except kvl.InvalidArgument:
                # its previous load holds these slots for the batch: with
                # these valid arguments the only InvalidArgument (its text
                # may be another thread's: a handle keeps its latest failure)
                continue
            with lock:
                accepted.append(rid)
            if i % 3 != 2 and i % 5 == 0:
                try:  # another thread's start may have taken it already
                    dst.lk.cancel(rid)
                except kvl.NotFound:
                    pass
            if i % 4 == 0:
                try:
                    b = dst.lk.start()
                    dst.lk.wait(b, LAYERS - 1, timeout=T)
                except kvl.Full:
                    pass

    ts = [threading.Thread(target=engine, args=(t,)) for t in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    b = dst.lk.start()
    dst.lk.wait(b, LAYERS - 1, timeout=T)
    src.lk.flush(timeout=T)
    seen = []
    for lk in (src.lk, dst.lk):
        while True:
            got = lk.poll(64, timeout=0.05)
            if not got:
                break
            seen += [c.id for c in got]
    assert sorted(seen) == sorted(accepted)


@pytest.mark.parametrize("seed", [3, 7])
def test_fault_store_never_reports_wrong_bytes(seed):
    uri = (f"fault+mem:?capacity=64MiB&fault.error=0.01&fault.corrupt=0.01"
           f"&fault.evict=0.005&fault.seed={seed}")
    src_pool = kv_pool(seed=seed)
    dst_pool = kv_pool(fill=-1.0)
    with kvl.Store(uri) as st, kv_layout(src_pool) as ls, \
            kv_layout(dst_pool) as ld, kvl.Linker(ls, st) as src, \
            kvl.Linker(ld, st) as dst:
        pages = kvl.hash_pages(tokens(12, seed=seed), PAGE_SIZE)
        failures = successes = partial = lookup_errors = 0
        rid = 0
        for rnd in range(12):
            rid += 1
            c = offload_sync(src, rid, pages, range(12))
            try:  # a key failed by the store fails the lookup, not a miss
                dst.lookup(pages)
            except kvl.StoreIOError:
                lookup_errors += 1
            dst_pool.fill(-1.0)
            rid += 1
            slots = list(range(12, 24))
            c, errs = load_sync(dst, rid, pages, slots)
            assert c.n_pages == 12 and c.valid_pages <= 12
            if c.ok:
                successes += 1
                assert c.valid_pages == 12 and all(e is None for e in errs)
            else:
                failures += 1
                assert any(e is not None for e in errs)
            # Every page reported valid holds the right bytes, every layer.
            v = c.valid_pages
            assert np.array_equal(dst_pool[:, :, 12:12 + v],
                                  src_pool[:, :, 0:v]), \
                f"round {rnd}: {v} pages reported valid hold wrong bytes"
            partial += 0 < v < 12
        assert failures > 0, "the fault store injected nothing"
        assert successes > 0, "no load got through the fault store"
        assert successes + failures == 12
        print(f"fault store seed {seed}: {lookup_errors} lookups failed, "
              f"{successes} loads ok, {failures} "
              f"failed ({partial} with a valid prefix)")
        j = json.loads(dst.render_stats())
        assert j["linker"]["load_failures"] == failures


def test_old_namespace_arguments_refused(engines):
    """A namespace is a prior of hash_pages, not an argument of the linker:
    a seed passed where 0.1 took one is refused, never taken for something
    else (pool_pages, an event)."""
    src, dst = engines
    seed = kvl.namespace_seed("tenant-a")
    pages = kvl.hash_pages(tokens(2), PAGE_SIZE, prior=seed)
    with pytest.raises(TypeError):
        dst.lk.lookup(pages, seed)
    with pytest.raises(TypeError):
        dst.lk.load(1, pages, [0, 1], seed)
    with pytest.raises(TypeError):
        src.lk.offload(1, pages, [0, 1], seed)
    assert dst.lk.poll() == [] and src.lk.poll() == []  # nothing accepted


def test_prober_sees_every_rank(store):
    """A Prober over a layout of sizes only answers what all tp ranks can
    restore; Layout.key(shard=) names any rank's objects."""
    pages = kvl.hash_pages(tokens(5, seed=60), PAGE_SIZE)
    ranks = []
    for r in range(2):
        lay = kv_layout(kv_pool(seed=r + 1), shard=kvl.Shard(tp_rank=r,
                                                             tp_size=2))
        lk = kvl.Linker(lay, store)
        assert offload_sync(lk, 1, pages, range(5)).ok
        ranks.append(lk)
    # The same sizes, no memory: one k and one v shape per layer.
    shapes = kvl.Layout("pytest/f32", PAGE_SIZE,
                        shard=kvl.Shard(tp_size=2))
    ref = ranks[0].layout
    pid = shapes.add_pool("kv")
    for layer in ref.pool_layers("kv"):
        pieces = ref.page_pieces("kv", 0, layer)  # k, then v
        for comp, (_, n) in zip(("k", "v"), pieces):
            shapes.add_shape(pid, comp, layer, n)
    shapes.finalize()
    assert shapes.fingerprint("kv") == ref.fingerprint("kv")
    with pytest.raises(kvl.InvalidArgument, match="sizes only"):
        kvl.Linker(shapes, store)
    with kvl.Prober(store, [shapes]) as pr:
        assert pr.lookup(pages) == 5
        assert pr.lookup_set(pages) == {0, 1, 2, 3, 4, 5}
        key = shapes.key("kv", pages[3], shard=kvl.Shard(tp_rank=1,
                                                         tp_size=2))
        assert key == ranks[1].layout.key("kv", pages[3])
        store.remove(key)
        assert pr.lookup(pages) == 3
        assert ranks[0].lookup(pages) == 5  # rank 0 alone still has them
        with pytest.raises(kvl.StateError, match="close them first"):
            shapes.close()
        with pytest.raises(kvl.InvalidArgument, match="not one of"):
            shapes.key("kv", pages[0], shard=kvl.Shard(tp_size=4))
    assert pr.closed
    with pytest.raises(kvl.StateError, match="closed"):
        pr.lookup(pages)
    with pytest.raises(kvl.InvalidArgument, match="one per stage"):
        kvl.Prober(store, [shapes_pp2()])
    with pytest.raises(kvl.InvalidArgument, match="no layouts"):
        kvl.Prober(store, [])
    with pytest.raises(kvl.StoreIOError):
        kvl.Prober(kvl.Store("fault+mem:?fault.down=1"),
                   [shapes]).lookup(pages)
    for lk in ranks:
        lk.close()


def shapes_pp2():
    """Stage 0 of a two-stage model, of sizes only."""
    lay = kvl.Layout("pytest/pp", PAGE_SIZE, shard=kvl.Shard(pp_size=2))
    lay.add_shape(lay.add_pool("kv"), "k", 0, 64)
    return lay.finalize()
