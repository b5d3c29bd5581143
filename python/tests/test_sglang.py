# SPDX-License-Identifier: Apache-2.0
"""kvlink.sglang driven exactly as SGLang's UnifiedCacheLinkerWrapper drives
an external linker (sglang_driver.py), over SGLang-shaped pools
(sglang_standins.py; numpy on the CPU here, CUDA tensors when torch has a
GPU): MHA, MLA with replicated TP ranks as threads, a sliding-window
hybrid, DSA with a draft pool, DeepSeek-V4-style pools from SGLang's own
pool group; lookup sets against SGLang's batch_exists_v2 on random
presence patterns; failures: store errors mid-batch, corrupt objects,
eviction after lookup, a store down at start-up, a store failing lookups,
reset and close with work queued, bad input."""

import os
import subprocess
import sys
import time
import types

import pytest

from conftest import check_adapter_import, np
import kvlink as kvl
import sglang_standins as sg
from sglang_driver import (ComponentType, MinAllReduce, PoolName,
                           PoolTransfer, Rank, create_linker, run_ranks)

PAGE = 4
LAYERS = 4
SLOTS = 64       # page slots per pool, slot 0 is SGLang's padding page
CONFIG = {"linker": "KvlinkLinker", "linker_module_path": "kvlink.sglang"}
T = 30.0



def alloc_fn(seed=None, dev="cpu"):
    """Pool tensors: random bytes with a seed (a source server), zeros
    without (a destination)."""
    rng = np.random.default_rng(seed)

    def alloc(shape, dtype="float16"):
        a = np.zeros(shape, dtype) if seed is None else \
            rng.integers(0, 255, shape).astype(dtype)
        if dev == "cpu":
            return a
        import torch
        return torch.from_numpy(a).to("cuda")
    return alloc


def host(x):
    """A pool tensor's bytes as a numpy array (after the GPU's work)."""
    if hasattr(x, "cpu"):
        import torch
        torch.cuda.synchronize()
        return x.cpu().numpy()
    return x


def tokens(n_pages, seed=0):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, 32000, n_pages * PAGE)]


class Server:
    """One SGLang rank: pools of one kind, its allocator and the linker
    made by SGLang's factory."""

    def __init__(self, kind, store, seed=None, tp=(0, 1), allreduce=None,
                 extra=None, window_pages=2, draft=False, dev="cpu"):
        a = alloc_fn(seed, dev)
        size = (SLOTS - 1) * PAGE
        self.kind = kind
        self.window_pages = window_pages if kind == "swa" else 0
        if kind in ("mha", "hnd"):
            kv = sg.MHATokenToKVPool(size, PAGE, np.float16, 2, 8, LAYERS, a,
                                     kv_cache_layout=kind.replace("mha",
                                                                  "nhd"))
        elif kind == "mla":
            kv = sg.MLATokenToKVPool(size, PAGE, np.float16, 12, 4, LAYERS, a)
        elif kind == "dsa":
            kv = sg.DSATokenToKVPool(size, PAGE, np.float16, 12, 4, 24,
                                     LAYERS, a)
        elif kind == "swa":
            kv = sg.SWAKVPool(size, size, PAGE, np.float16, 2, 8, [1, 3],
                              LAYERS, a)
        else:
            raise ValueError(kind)
        self.kv = kv
        self.drafts = (sg.MHATokenToKVPool(size, PAGE, np.float16, 2, 8, 1,
                                           a),) if draft else ()
        group = sg.Group(*tp) if tp[1] > 1 else None
        self.params = sg.CacheInitParams(
            token_to_kv_pool_allocator=sg.TokenAllocator(kv, SLOTS),
            page_size=PAGE, tp_cache_group=group,
            sliding_window_size=window_pages * PAGE if kind == "swa"
            else None,
            mtp_draft_device_pools=self.drafts)
        cfg = dict(CONFIG, linker_extra_config={"store": store,
                                                **(extra or {})})
        comps = [ComponentType.FULL] + \
            ([ComponentType.SWA] if kind == "swa" else [])
        self.linker = create_linker(cfg, sg.ServerArgs(), self.params, comps)
        self.rank = Rank(self.linker, self.params,
                         allreduce or MinAllReduce(1), LAYERS,
                         self.read_layer, self.window_pages)

    def buffers(self, layer):
        """Every buffer of model layer `layer` (the draft's layer too)."""
        kv = self.kv
        if self.kind in ("mha", "hnd"):
            out = [kv.k_buffer[layer], kv.v_buffer[layer]]
        elif self.kind == "mla":
            out = [kv.kv_buffer[layer]]
        elif self.kind == "dsa":
            out = [kv.kv_buffer[layer], kv.index_k_with_scale_buffer[layer]]
        else:
            idx, is_swa = kv.layers_mapping[layer]
            pool = kv.swa_kv_pool if is_swa else kv.full_kv_pool
            out = [pool.k_buffer[idx], pool.v_buffer[idx]]
        for d in self.drafts:
            if layer < d.layer_num:
                out += [d.k_buffer[layer], d.v_buffer[layer]]
        return out

    def read_layer(self, layer):
        """What the forward pass reads at `layer`, through the accessors
        (which wait on the counter)."""
        kv = self.kv
        if self.kind in ("mha", "hnd"):
            kv.get_key_buffer(layer), kv.get_value_buffer(layer)
        elif self.kind == "dsa":
            kv.get_key_buffer(layer), kv.get_index_k_with_scale_buffer(layer)
        elif self.kind == "mla":
            kv.get_key_buffer(layer)
        else:
            kv.buffer(layer, "k")
        # Copies on the current stream: after the counter's wait on a GPU.
        return [b.clone() if hasattr(b, "clone") else b.copy()
                for b in self.buffers(layer)]

    def page_rows(self, buf, slot):
        """The rows of page `slot` in a buffer (rows are tokens or pages)."""
        if buf.shape[0] == SLOTS:  # one row per page (HND, indexer)
            return buf[slot]
        return buf[slot * PAGE:(slot + 1) * PAGE]


def same_pages(src, src_slots, dst, dst_slots, layers=None, reads=None):
    """The pages of src_slots in src equal dst_slots in dst, every layer
    (or the copies the forward pass read)."""
    for layer in layers if layers is not None else range(LAYERS):
        bufs = reads[layer] if reads is not None else dst.buffers(layer)
        for sb, db in zip(src.buffers(layer), bufs):
            for s, d in zip(src_slots, dst_slots):
                if not np.array_equal(host(src.page_rows(sb, s)),
                                      host(dst.page_rows(db, d))):
                    return False
    return True


def offload_prompt(srv, keys, slots, node="n"):
    assert srv.rank.backup(node, keys, slots)
    srv.rank.drain(T)
    assert srv.rank.stored[node]


# ---------------------------------------------------------------- import

def test_import_needs_no_sglang():
    """import kvlink.sglang works without SGLang (and without torch);
    the class says what it needs when SGLang is missing."""
    check_adapter_import("sglang", "KvlinkLinker", "sglang",
                         "UnifiedCacheLinker")


def test_factory_and_config():
    """SGLang's factory accepts the class; the config is checked."""
    import kvlink.sglang as ks
    srv = Server("mha", "mem:")
    assert isinstance(srv.linker, sg.install()["UnifiedCacheLinker"])
    assert type(srv.linker) is ks.KvlinkLinker
    assert hasattr(srv.linker.layer_done_counter, "wait_until")
    assert srv.linker.layout.pool_count == 1
    srv.linker.close()
    with pytest.raises(ValueError, match="linker_extra_config: unknown keys"):
        Server("mha", "mem:", extra={"stor": "mem:"})
    for key, bad in (("load_timeout_s", "soon"), ("reconnect_s", -1),
                     ("io_batch", None), ("gpu_staging", -1),
                     ("gpu_copy", "fast")):
        with pytest.raises(ValueError, match=key):
            Server("mha", "mem:", extra={key: bad})
    # A store that cannot be opened for another reason than being down is
    # a configuration error, not an outage to wait out.
    with pytest.raises(kvl.KvlinkError, match="URI|scheme|unknown"):
        Server("mha", "nosuch://x")
    with pytest.raises(kvl.KvlinkError, match="capacity"):
        Server("mha", "mem:?capacity=lots")
    with pytest.raises(ValueError, match="UnifiedCacheLinker|no attribute"):
        create_linker(dict(CONFIG, linker="Nope"), sg.ServerArgs(),
                      srv.params, [ComponentType.FULL])


# ----------------------------------------------------------- round trips

@pytest.mark.parametrize("kind", ["mha", "hnd", "mla", "dsa", "swa"])
def test_round_trip(kind, dev):
    """One rank: a node offloaded by one server is restored into another
    server's pools layer by layer, byte for byte, and completes once. The
    draft pool of the DSA server is never waited on (as in SGLang): it is
    in place once the target's last layer is."""
    round_trip(kind, dev, kvl.Store("mem:"))


@pytest.mark.parametrize("kind", ["mha", "swa"])
def test_remote_store_round_trip(kind, dev):
    """The same on the store of $KVL_TEST_STORE_URI (redis://, mooncake://:
    ctest's redis_sglang and mooncake_sglang set it)."""
    uri = os.environ.get("KVL_TEST_STORE_URI")
    if not uri:
        pytest.skip("KVL_TEST_STORE_URI is not set (ctest's redis_sglang "
                    "and mooncake_sglang set it)")
    round_trip(kind, dev, kvl.Store(uri), seed=int(time.time_ns() % 10**9))


def round_trip(kind, dev, store, seed=0):
    src = Server(kind, store, seed=1, draft=kind == "dsa", dev=dev)
    dst = Server(kind, store, draft=kind == "dsa", dev=dev)
    keys = src.rank.tail_hashes(tokens(6, seed=seed))
    src_slots = src.rank.alloc.alloc_pages(6)
    offload_prompt(src, keys, src_slots)
    assert dst.linker.lookup("r", dst.rank.transfers(keys)) == \
        list(range(1, 7))
    assert dst.rank.match("r", keys) == 6
    dst_slots = dst.rank.load_back("r", keys)
    reads = dst.rank.forward()
    # What each layer's accessor returned already held that layer.
    if kind == "swa":  # swa layers hold only the window's last 2 pages
        full = [0, 2]
        assert same_pages(src, src_slots, dst, dst_slots, full, reads)
        assert same_pages(src, src_slots[-2:], dst, dst.rank.swa_slots["r"],
                          [1, 3], reads)
    else:
        assert same_pages(src, src_slots, dst, dst_slots, reads=reads)
    dst.rank.drain(T)
    assert dst.linker.failed_loads == {}
    assert dst.rank.pending_loads == {}
    # Nothing queued: -1, and the counter does not wait.
    assert dst.linker.start_layer_wise_loading() == -1
    src.linker.close()
    dst.linker.close()


def test_mla_tp_ranks_share_replicated_pages(dev):
    """Two TP ranks (threads) of an MLA model: the latent is replicated,
    written by tp rank 0 only, and restored by both."""
    store = kvl.Store("mem:")
    ar_src, ar_dst = MinAllReduce(2), MinAllReduce(2)

    def rank(r):
        src = Server("mla", store, seed=1, tp=(r, 2), allreduce=ar_src,
                     dev=dev)
        k = src.rank.tail_hashes(tokens(5, seed=3))
        s_slots = src.rank.alloc.alloc_pages(5)
        offload_prompt(src, k, s_slots)
        dst = Server("mla", store, tp=(r, 2), allreduce=ar_dst, dev=dev)
        assert dst.rank.match("q", k) == 5
        d_slots = dst.rank.load_back("q", k)
        reads = dst.rank.forward()
        assert same_pages(src, s_slots, dst, d_slots, reads=reads)
        dst.rank.drain(T)
        key = dst.linker.layout.key("kv", kvl.hash_from_hex(k[0]))
        src.linker.close()
        dst.linker.close()
        return key

    keys = run_ranks(2, rank)
    assert keys[0] == keys[1] and "tp" not in keys[0].split(":")[-1]
    assert store.stats()["objects"] == 5  # one copy, not one per rank


def test_pipeline_stage_and_cp_rank():
    """A second pipeline stage (its pool starts at model layer 8) of a CP
    rank: kvlink's layers are the stage's from 0, as its pools wait; the
    shard's cp rank comes from the attention CP group, its pp rank from
    pp_rank, and both are in the keys."""
    store = kvl.Store("mem:")
    servers = []
    for seed in (1, None):
        a = alloc_fn(seed)
        kv = sg.MHATokenToKVPool((SLOTS - 1) * PAGE, PAGE, np.float16, 2, 8,
                                 LAYERS, a, start_layer=8)
        params = sg.CacheInitParams(
            token_to_kv_pool_allocator=sg.TokenAllocator(kv, SLOTS),
            page_size=PAGE, attn_cp_cache_group=sg.Group(1, 2), pp_rank=1,
            pp_size=2)
        lk = create_linker(dict(CONFIG, linker_extra_config={"store": store}),
                           sg.ServerArgs(), params, [ComponentType.FULL])
        reads = []

        def read(layer, kv=kv, reads=reads):
            reads.append(layer)
            kv.get_key_buffer(8 + layer)  # SGLang's model layer id
            return kv.k_buffer[layer].copy()
        servers.append((kv, Rank(lk, params, MinAllReduce(1), LAYERS, read),
                        reads))
    (skv, src, _), (dkv, dst, reads) = servers
    assert dst.linker.layout.shard == kvl.Shard(0, 1, 1, 2, 1, 2)
    assert dst.linker.layout.pool_layers("kv") == tuple(range(LAYERS))
    keys = src.tail_hashes(tokens(3, seed=50))
    assert src.backup("n", keys, [1, 2, 3])
    src.drain(T)
    assert dst.linker.layout.key("kv", kvl.hash_from_hex(
        keys[0])).endswith(":kv:tp0_cp1_pp1")
    assert dst.match("p", keys) == 3
    slots = dst.load_back("p", keys)
    got = dst.forward()
    assert reads == list(range(LAYERS))
    for layer in range(LAYERS):
        assert np.array_equal(got[layer][slots[0] * PAGE:(slots[-1] + 1) *
                                         PAGE],
                              skv.k_buffer[layer][PAGE:4 * PAGE])
    dst.drain(T)
    for _, r, _ in servers:
        r.linker.close()


def test_ranks_intersect_sets():
    """Two TP ranks of an MHA model, each missing other pages: the MIN
    all-reduce of their sets gives the longest prefix both can restore."""
    store = kvl.Store("mem:")
    ar = MinAllReduce(2)

    def rank(r):
        srv = Server("mha", store, seed=r + 1, tp=(r, 2), allreduce=ar)
        keys = srv.rank.tail_hashes(tokens(6, seed=4))
        offload_prompt(srv, keys, srv.rank.alloc.alloc_pages(6))
        if r == 1:  # rank 1 loses page 4
            store.remove(srv.linker.layout.key("kv", kvl.hash_from_hex(
                keys[4])))
        local = srv.linker.lookup("x", srv.rank.transfers(keys))
        hit = srv.rank.match("x", keys)
        srv.linker.close()
        return local, hit

    (l0, h0), (l1, h1) = run_ranks(2, rank)
    assert l0 == [1, 2, 3, 4, 5, 6] and l1 == [1, 2, 3, 4]
    assert h0 == h1 == 4


# --------------------------------------------------- sets vs SGLang's rule

def ref_batch_exists_v2(n, present, policies):
    """SGLang's batch_exists_v2: restorable lengths 1..n kept by every
    pool; ALL_PAGES up to its first missing page, TRAILING_PAGES(w) where
    the w pages before the stop point exist (all of them when p <= w)."""
    restorable = list(range(1, n + 1))
    for pool, (policy, trailing) in policies.items():
        ex = present[pool]
        if policy == "all":
            boundary = next((i for i in range(n) if not ex[i]), n)
            ok = set(range(1, boundary + 1))
        else:
            t = max(1, trailing)
            ok = {p for p in range(1, n + 1)
                  if all(ex[max(0, p - t):p])}
        restorable = [p for p in restorable if p in ok]
    return restorable


def test_set_has_holes():
    """SGLang's own example: kv on pages a..d, window state (window 1) only
    on b and d: the restorable set is {2, 4}, not a prefix."""
    store = kvl.Store("mem:")
    src = Server("swa", store, seed=1, window_pages=1)
    keys = src.rank.tail_hashes(tokens(4, seed=40))
    slots = src.rank.alloc.alloc_pages(4)
    for i in range(4):  # one node per page; a and c lost their window data
        assert src.rank.backup(f"n{i}", keys[i:i + 1], slots[i:i + 1],
                               swa_pages=i % 2)
    src.rank.drain(T)
    assert src.linker.lookup("h", src.rank.transfers(keys)) == [2, 4]
    assert src.linker.lookup("h", src.rank.transfers(keys[:3])) == [2]
    src.linker.close()


@pytest.mark.parametrize("seed", range(8))
def test_sets_match_batch_exists_v2(seed):
    """Random presence of kv and swa objects: the lookup's set is SGLang's
    (the swa transfer carries the window's last pages, as SGLang's SWA
    component builds it)."""
    rng = np.random.default_rng(seed)
    store = kvl.Store("mem:")
    window = int(rng.integers(1, 4))
    n = int(rng.integers(3, 12))
    src = Server("swa", store, seed=1, window_pages=window)
    keys = src.rank.tail_hashes(tokens(n, seed=seed))
    # Store every page of both pools, then remove some at random.
    slots = src.rank.alloc.alloc_pages(n)
    lay = src.linker.layout
    assert src.rank.backup("n", keys, slots)
    src.rank.drain(T)
    present = {"kv": rng.random(n) < 0.85, "swa": rng.random(n) < 0.6}
    for pool, ex in present.items():
        for i in np.flatnonzero(~ex):
            store.remove(lay.key(pool, kvl.hash_from_hex(keys[i])))
    got = src.linker.lookup("s", src.rank.transfers(keys))
    want = ref_batch_exists_v2(
        n, present, {"kv": ("all", 0), "swa": ("trailing", min(window, n))})
    assert got == want, (window, n, present)
    src.linker.close()


# ------------------------------------------------- SGLang's own pool group

def test_deepseek_v4_pools_from_sglang_pool_group(monkeypatch):
    """Pools only SGLang's assembler knows (DeepSeek-V4: compressed KV on
    some layers, rows that are pages, a window state fed by the SWA
    transfer) come from its DevicePoolGroup, entry by entry."""
    a = alloc_fn(5)
    c4 = [a((SLOTS, 40), "uint8") for _ in range(2)]     # layers 0 and 2
    state = [a((SLOTS, 24), "uint8") for _ in range(2)]  # window state
    E = types.SimpleNamespace
    group = E(rank_replicated=True, num_layers=3, entries=[
        E(name=PoolName.DEEPSEEK_V4_C4, indices_from_pool=PoolName.KV,
          components=[c4], layer_mapping={0: 0, 2: 1}, rows_are_pages=True,
          translate_indices=lambda i: i),
        E(name=PoolName.DEEPSEEK_V4_C4_STATE, indices_from_pool=PoolName.SWA,
          components=[state], layer_mapping={0: 0, 2: 1},
          rows_are_pages=True, translate_indices=lambda i: i)])
    mod = types.ModuleType("sglang.srt.mem_cache.hybrid_cache."
                           "linker_pool_assembler")
    mod.resolve_hybrid_device_pool_group = lambda **kw: group
    monkeypatch.setitem(sys.modules, mod.__name__, mod)

    class DeepSeekV4TokenToKVPool(sg._Pool):
        pass

    kv = DeepSeekV4TokenToKVPool((SLOTS - 1) * PAGE, PAGE, None, 3)
    params = sg.CacheInitParams(
        token_to_kv_pool_allocator=sg.TokenAllocator(kv, SLOTS),
        page_size=PAGE, sliding_window_size=2 * PAGE)
    cfg = dict(CONFIG, linker_extra_config={"store": "mem:"})
    lk = create_linker(cfg, sg.ServerArgs(), params,
                       [ComponentType.FULL, ComponentType.SWA])
    lay = lk.layout
    assert [p.name for p in lay.pools] == ["deepseek_v4_c4",
                                           "deepseek_v4_c4_state"]
    assert lay.pool_layers("deepseek_v4_c4") == (0, 2)
    assert lay.pool_info("deepseek_v4_c4_state").window == 2
    # Offload pages 1..4 from slots 5..8, then restore into 20..23.
    rank = Rank(lk, params, MinAllReduce(1), 3, lambda layer: None, 2)
    keys = rank.tail_hashes(tokens(4, seed=9))
    assert rank.backup("n", keys, [5, 6, 7, 8])
    rank.drain(T)
    before = [b[5:9].copy() for b in c4 + state]
    for b in c4 + state:
        b[5:9] = 0
    assert rank.match("r", keys) == 4
    # load_back, by hand: the window state goes to its own slots.
    assert lk.load("r", rank.transfers(keys, rank.token_indices(
        [20, 21, 22, 23]), rank.token_indices([22, 23])))
    rank.pending_loads["r"] = [20, 21, 22, 23]
    rank.forward()
    rank.drain(T)
    for b, want in zip(c4, before):
        assert np.array_equal(b[20:24], want)
    for b, want in zip(state, before[2:]):  # the window: last two pages
        assert np.array_equal(b[22:24], want[2:])
    lk.close()


# -------------------------------------------------------------- failures

def restored_server(uri, n=4, seed=11, dev="cpu", **kw):
    """(src, dst, keys): n pages offloaded by src through `uri`'s store
    (a fault store wrapping the source's)."""
    store = kvl.Store(uri)
    src = Server("mha", store, seed=1, dev=dev)
    keys = src.rank.tail_hashes(tokens(n, seed=seed))
    offload_prompt(src, keys, src.rank.alloc.alloc_pages(n))
    dst = Server("mha", store, dev=dev, **kw)
    return src, dst, keys


@pytest.mark.parametrize("fault", ["fail_get_call=2", "corrupt=1"])
def test_failed_load_is_never_reported_loaded(fault, dev):
    """A store failing the second layer's read, or corrupting every read:
    the forward pass raises LoadFailed at (or before) the failed layer,
    never computes over it; the batch still completes (SGLang releases its
    locks) and the request is in failed_loads; the next batch works."""
    from kvlink.sglang import LoadFailed
    src, dst, keys = restored_server(f"fault+mem:?fault.{fault}", dev=dev)
    assert dst.rank.match("bad", keys) == 4
    dst.rank.load_back("bad", keys)
    with pytest.raises(LoadFailed, match="layer"):
        dst.rank.forward()
    dst.rank.drain(T)
    assert "bad" in dst.linker.failed_loads
    assert not dst.linker.failed_loads["bad"].ok
    assert dst.linker.stats["failed_loads"] == 1
    src.linker.close()
    dst.linker.close()


def test_eviction_after_lookup(dev):
    """Pages evicted between lookup and load: the load fails, honestly."""
    from kvlink.sglang import LoadFailed
    store = kvl.Store("mem:")
    src = Server("mha", store, seed=1, dev=dev)
    keys = src.rank.tail_hashes(tokens(4, seed=12))
    offload_prompt(src, keys, src.rank.alloc.alloc_pages(4))
    dst = Server("mha", store, dev=dev)
    assert dst.rank.match("e", keys) == 4
    store.remove(dst.linker.layout.key("kv", kvl.hash_from_hex(keys[2])))
    dst.rank.load_back("e", keys)
    with pytest.raises(LoadFailed, match="NOTFOUND|evicted|absent"):
        dst.rank.forward()
    dst.rank.drain(T)
    assert dst.linker.failed_loads["e"].valid_pages == 2
    src.linker.close()
    dst.linker.close()


def test_store_failing_lookups_is_a_miss():
    """A store that fails exists calls: lookups miss (SGLang computes the
    request), offloads complete as failed, nothing raises."""
    srv = Server("mha", "fault+mem:?fault.down=1")
    keys = srv.rank.tail_hashes(tokens(3, seed=13))
    assert srv.linker.lookup("m", srv.rank.transfers(keys)) == []
    assert srv.linker.stats["lookup_errors"] == 1
    assert srv.rank.backup("n", keys, srv.rank.alloc.alloc_pages(3))
    srv.rank.drain(T)
    assert srv.rank.stored["n"] is False
    srv.linker.close()


def test_store_down_at_start_up():
    """The server starts and runs without the cache while its store cannot
    be reached, and uses it once it can (a Redis server started later)."""
    import shutil
    import socket
    if not kvl.has_feature("redis") or not shutil.which("redis-server"):
        pytest.skip("needs kvlink's Redis store and redis-server (a store "
                    "that is down at start-up, then up)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = Server("mha", f"redis://127.0.0.1:{port}",
                 extra={"reconnect_s": 0.05})
    assert srv.linker.stats["store_down"] >= 1
    keys = srv.rank.tail_hashes(tokens(3, seed=14))
    slots = srv.rank.alloc.alloc_pages(3)
    assert srv.rank.match("d", keys) == 0
    assert not srv.rank.backup("n", keys, slots)
    assert srv.linker.start_layer_wise_loading() == -1
    srv.rank.forward()  # nothing to wait for
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save",
                             "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not srv.rank.backup("n", keys, slots):
            assert time.monotonic() < deadline, "the store never came back"
            time.sleep(0.05)
        srv.rank.drain(T)
        assert srv.rank.stored["n"]
        assert srv.rank.match("d2", keys) == 3
        srv.linker.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_offload_results_are_fifo():
    """Offload results come back in the order the offloads were queued,
    a failed one as False in its place."""
    srv = Server("mha", "fault+mem:?fault.fail_put_call=2")
    results = []
    for i in range(3):
        keys = srv.rank.tail_hashes(tokens(2, seed=20 + i))
        assert srv.rank.backup(f"n{i}", keys, srv.rank.alloc.alloc_pages(2))
        srv.linker.layout  # keep the loop honest about what it queues
    deadline = time.monotonic() + T
    while len(results) < 3 and time.monotonic() < deadline:
        results += srv.rank.check_events()
        time.sleep(0.005)
    assert results == [True, False, True]
    srv.linker.close()


def test_cancel_reset_close_with_work_queued(dev):
    """cancel_queued_load never withdraws a published load (SGLang's own
    linkers now do the same); reset with loads queued and offloads in
    flight returns quiesced; close after that, and twice, is fine."""
    src, dst, keys = restored_server("fault+mem:?fault.latency_ms=20",
                                     dev=dev)
    assert dst.rank.match("c", keys) == 4
    slots = dst.rank.load_back("c", keys)
    assert dst.linker.cancel_queued_load("c") is False
    reads = dst.rank.forward()
    assert same_pages(src, [1, 2, 3, 4], dst, slots, reads=reads)
    dst.rank.drain(T)
    # Queue a load and an offload, then reset.
    assert dst.rank.match("c2", keys) == 4
    dst.rank.load_back("c2", keys)
    assert dst.rank.backup("m", keys, slots)
    t0 = time.monotonic()
    dst.linker.reset()
    assert time.monotonic() - t0 < T
    assert dst.linker.num_completed_loads() == 0
    assert dst.linker.num_completed_offloads() == 0
    assert dst.linker.start_layer_wise_loading() == -1
    # Still usable after reset.
    assert dst.rank.match("c3", keys) == 4
    dst.rank.pending_loads.clear()
    dst.rank.pending_offloads.clear()
    dst.rank.load_back("c3", keys)
    dst.rank.forward()
    dst.rank.drain(T)
    dst.linker.close()
    dst.linker.close()
    assert dst.linker.lookup("z", dst.rank.transfers(keys)) == []
    src.linker.close()


def test_bad_input():
    srv = Server("mha", "mem:")
    keys = srv.rank.tail_hashes(tokens(2, seed=30))
    for bad in ("zz" * 32, "ab" * 31, 7):
        with pytest.raises(ValueError, match="not a page hash"):
            srv.linker.lookup("b", [PoolTransfer(name=PoolName.KV,
                                                 keys=[bad])])
    with pytest.raises(ValueError, match="aligned runs"):
        srv.linker.load("b", [PoolTransfer(
            name=PoolName.KV, keys=keys,
            device_indices=np.arange(1, 1 + 2 * PAGE))])
    with pytest.raises(ValueError, match="whole"):
        srv.linker.offload([PoolTransfer(
            name=PoolName.KV, keys=keys, device_indices=np.arange(5))])
    with pytest.raises(ValueError, match="2 keys but 1 pages"):
        srv.linker.offload([PoolTransfer(
            name=PoolName.KV, keys=keys,
            device_indices=np.arange(PAGE, 2 * PAGE))])
    idx = srv.rank.token_indices([3, 4])
    assert srv.linker.load("b", srv.rank.transfers(keys, idx))
    with pytest.raises(RuntimeError, match="already queued"):
        srv.linker.load("b", srv.rank.transfers(keys, idx))
    # Nothing to load or offload: declined, not raised.
    assert srv.linker.offload([PoolTransfer(name=PoolName.SWA,
                                            keys=keys)]) is False
    assert srv.linker.load("c", []) is False
    assert srv.linker.lookup("c", []) == []
    srv.linker.close()
    # Pools kvlink cannot cache.

    class HybridLinearKVPool(sg._Pool):
        mamba_pool = object()

    pool = HybridLinearKVPool(16, PAGE, None, 2)
    params = sg.CacheInitParams(
        token_to_kv_pool_allocator=sg.TokenAllocator(pool, 4), page_size=PAGE)
    with pytest.raises(ValueError, match="Mamba"):
        create_linker(dict(CONFIG), sg.ServerArgs(), params,
                      [ComponentType.FULL, ComponentType.MAMBA])
    swa = sg.SWAKVPool(60, 60, PAGE, np.float16, 2, 8, [1], 2, alloc_fn())
    params = sg.CacheInitParams(
        token_to_kv_pool_allocator=sg.TokenAllocator(swa, 16), page_size=PAGE)
    with pytest.raises(ValueError, match="sliding_window_size"):
        create_linker(dict(CONFIG), sg.ServerArgs(), params,
                      [ComponentType.FULL, ComponentType.SWA])
