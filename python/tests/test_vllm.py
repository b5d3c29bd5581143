# SPDX-License-Identifier: Apache-2.0
"""kvlink.vllm driven as vLLM drives a KV connector (vllm_driver.py), over
vLLM-shaped KV caches (vllm_standins.py; numpy on the CPU, CUDA tensors
where torch has a GPU): FlashAttention and FlashInfer layouts in NHD and
HND, MLA, tensor-parallel workers; a new request with a full hit, a partial
hit, pipeline stages, a load error at page k reported as exactly those
blocks, preemption
and resumption, a save after the request ends that keeps its blocks until
every worker is done, the roles of prefill/decode disaggregation, load
errors exact under random faults; scheduler and workers as separate
processes over Redis (ctest redis_vllm)."""

import os

import pytest

from conftest import check_adapter_import, np
import kvlink as kvl
import vllm_standins as vs
from vllm_driver import Engine, RemoteWorker, Worker, model

BS = 4



@pytest.fixture(autouse=True)
def nhd():
    vs.KV_LAYOUT[0] = "NHD"
    yield
    vs.KV_LAYOUT[0] = "NHD"


def tokens(n, seed=0):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(1, 32000, n)]


def engine(store, backend="flash", tp=1, role="kv_both", dev="cpu",
           extra=None):
    cfg, kcc = model(backend, tp=tp, role=role,
                     extra={"store": store, **(extra or {})})
    return Engine(cfg, kcc, [Worker(cfg, kcc, r, dev) for r in range(tp)])


def prefill(eng, rid, toks, **kw):
    """Admits a request, runs its prefill step, ends it and waits for its
    save: (external tokens, the step's results)."""
    req = vs.Request(rid, toks, **kw)
    ext = eng.admit(req)
    out = eng.step([rid])
    eng.finish(rid)
    eng.drain()
    return ext, out


def test_import_needs_no_vllm():
    """import kvlink.vllm works without vLLM (and without torch); the
    class says what it needs when vLLM is missing."""
    check_adapter_import("vllm", "KvlinkConnector", "vllm",
                         "KVConnectorBase_V1")


@pytest.mark.parametrize("backend,layout", [("flash", "NHD"),
                                            ("flash", "HND"),
                                            ("flashinfer", "NHD"),
                                            ("flashinfer", "HND"),
                                            ("mla", "NHD")])
def test_hit_partial_hit_and_save(backend, layout, dev):
    """A prompt computed and saved by one request is loaded by the next
    (whole blocks, the last token left to compute), byte for byte; a
    prompt that shares 3 blocks loads 3."""
    vs.KV_LAYOUT[0] = layout
    store = kvl.Store("mem:")
    eng = engine(store, backend, dev=dev)
    toks = tokens(5 * BS + 2, seed=1)
    ext, out = prefill(eng, "a", toks)
    assert ext == 0 and out[0]["invalid"] == set()
    ext, out = prefill(eng, "b", toks)
    assert ext == 5 * BS
    assert out[0]["invalid"] == set() and out[0]["bad"] == set()
    # A whole-block prompt: its last block holds the last token, which
    # vLLM must compute: 4 of its 5 blocks load.
    ext, _ = prefill(eng, "c", toks[:5 * BS])
    assert ext == 4 * BS
    other = toks[:3 * BS] + tokens(2 * BS + 1, seed=2)
    ext, out = prefill(eng, "d", other)
    assert ext == 3 * BS and out[0]["bad"] == set()
    eng.close()


def test_tp_workers_and_mla_replication(dev):
    """Two tensor-parallel workers: each stores and loads its own shard;
    a page missing on one worker ends the hit for both. With MLA the
    latent is stored once (tp rank 0) and loaded by both."""
    store = kvl.Store("mem:")
    eng = engine(store, "flash", tp=2, dev=dev)
    toks = tokens(4 * BS + 1, seed=3)
    prefill(eng, "a", toks)
    lay = eng.workers[1].conn._layout
    store.remove(lay.key("kv", kvl.hash_pages(toks, BS)[2]))
    ext, out = prefill(eng, "b", toks)
    assert ext == 2 * BS
    assert all(r["bad"] == set() and r["invalid"] == set() for r in out)
    eng.close()
    store = kvl.Store("mem:")
    eng = engine(store, "mla", tp=2, dev=dev)
    before = store.stats()["objects"]
    prefill(eng, "a", toks)
    assert store.stats()["objects"] - before == 4  # not 8
    ext, out = prefill(eng, "b", toks)
    assert ext == 4 * BS and all(r["bad"] == set() for r in out)
    eng.close()


def test_pipeline_stages(dev):
    """Two pipeline stages (3 layers: vLLM gives stage 0 two, stage 1 one)
    of two tensor-parallel ranks each. The scheduler's KV cache config
    names stage 0's layers only; the prober derives stage 1's. A page
    missing on stage 1 ends the hit."""
    extra = {"store": kvl.Store("mem:")}
    cfg, kcc0 = model("flash", layers=3, tp=2, pp=2, extra=extra)
    _, kcc1 = model("flash", layers=3, tp=2, pp=2, stage=1, extra=extra)
    assert [len(k.kv_cache_groups[0].layer_names) for k in (kcc0, kcc1)] \
        == [2, 1]
    workers = [Worker(cfg, kcc, r, dev, stage=st)
               for st, kcc in ((0, kcc0), (1, kcc1)) for r in range(2)]
    eng = Engine(cfg, kcc0, workers)
    toks = tokens(4 * BS + 1, seed=12)
    assert prefill(eng, "a", toks)[0] == 0
    ext, out = prefill(eng, "b", toks)
    assert ext == 4 * BS
    assert all(r["bad"] == set() and r["invalid"] == set() for r in out)
    lay = workers[3].conn._layout  # stage 1, tp rank 1
    assert lay.shard == kvl.Shard(1, 2, 0, 1, 1, 2)
    assert lay.pool_layers("kv") == (2,)
    extra["store"].remove(lay.key("kv", kvl.hash_pages(toks, BS)[2]))
    ext, out = prefill(eng, "c", toks)
    assert ext == 2 * BS and all(r["bad"] == set() for r in out)
    eng.close()


@pytest.mark.parametrize("k", [0, 2])
def test_load_error_at_page_k(k, dev):
    """An object lost between the scheduler's lookup and the worker's load
    (page k): exactly the blocks from k on are reported, and the blocks
    before k hold the right bytes."""
    store = kvl.Store("mem:")
    eng = engine(store, "flash", dev=dev)
    toks = tokens(5 * BS + 1, seed=4)
    prefill(eng, "a", toks)
    req = vs.Request("b", toks)
    assert eng.admit(req) == 5 * BS
    lay = eng.workers[0].conn._layout
    store.remove(lay.key("kv", kvl.hash_pages(toks, BS)[k]))
    out = eng.step(["b"])[0]
    blocks = eng.reqs["b"][1]
    assert out["invalid"] == set(blocks[k:5])
    assert out["bad"] <= out["invalid"]
    assert eng.workers[0].conn.stats["failed_blocks"] == 5 - k
    eng.finish("b")
    eng.drain()
    eng.close()


def test_failed_load_leaves_the_batch_right(dev):
    """A load that fails at the first layer fails the waits of its whole
    batch at once; another request of the same batch, whose layers are
    still on their way (every store call takes 20 ms), must not be read
    before they land: every block not reported holds the right bytes."""
    store = kvl.Store("fault+mem:?fault.latency_ms=20")
    eng = engine(store, "flash", dev=dev)
    xt, yt = tokens(4 * BS + 1, seed=13), tokens(4 * BS + 1, seed=14)
    prefill(eng, "a", xt)
    prefill(eng, "b", yt)
    assert eng.admit(vs.Request("x", xt)) == 4 * BS
    assert eng.admit(vs.Request("y", yt)) == 4 * BS
    lay = eng.workers[0].conn._layout
    store.remove(lay.key("kv", kvl.hash_pages(xt, BS)[0]))
    out = eng.step(["x", "y"])[0]
    assert out["invalid"] == set(eng.reqs["x"][1][:4])
    assert out["bad"] <= out["invalid"], out["bad"]
    eng.finish("x")
    eng.finish("y")
    eng.drain()
    eng.close()


def test_preemption_and_resumption(dev):
    """A request preempted after its load is looked up again when it is
    resumed, and loads again into its new blocks."""
    store = kvl.Store("mem:")
    eng = engine(store, "flashinfer", dev=dev)
    toks = tokens(3 * BS + 3, seed=5)
    prefill(eng, "a", toks)
    req = vs.Request("p", toks)
    assert eng.admit(req) == 3 * BS
    out = eng.step(["p"])[0]
    assert out["bad"] == set()
    # Preempted: vLLM frees its blocks (no request_finished) and tells the
    # workers; resumed as a new request with num_computed_tokens 0.
    eng.workers[0].conn.handle_preemptions({"p"})
    eng.free("p")
    req = vs.Request("p", toks)
    assert eng.admit(req) == 3 * BS
    out = eng.step(["p"])[0]
    assert out["bad"] == set() and out["invalid"] == set()
    eng.finish("p")
    eng.drain()
    eng.close()


def test_save_keeps_blocks_until_done():
    """request_finished returns True (vLLM keeps the blocks) and the id
    comes back in get_finished's first set on every worker once the save
    is done; a request that computed no full block is not kept."""
    store = kvl.Store("fault+mem:?fault.latency_ms=30")
    eng = engine(store, "flash", tp=2)
    toks = tokens(2 * BS + 1, seed=6)
    req = vs.Request("s", toks)
    eng.admit(req)
    eng.step(["s"])
    assert eng.finish("s") is True
    n_free = len(eng.free_blocks)
    out = eng.step()  # the save starts; it takes 30 ms per store call
    assert "s" in eng.saving or all("s" in r["sent"] for r in out)
    eng.drain()
    assert len(eng.free_blocks) > n_free  # freed once both reported
    short = vs.Request("t", tokens(BS - 1, seed=7))
    eng.admit(short)
    eng.step(["t"])
    assert eng.finish("t") is False
    eng.close()


def test_roles_producer_and_consumer():
    """kv_producer (prefill) saves and never loads; kv_consumer (decode)
    loads and never saves: pages go from one to the other through the
    store."""
    store = kvl.Store("mem:")
    prod = engine(store, "flash", role="kv_producer")
    cons = engine(store, "flash", role="kv_consumer")
    toks = tokens(4 * BS + 1, seed=8)
    ext, _ = prefill(prod, "p1", toks)
    assert ext == 0
    ext, _ = prefill(prod, "p2", toks)
    assert ext == 0  # a producer never loads
    ext, out = prefill(cons, "d1", toks)
    assert ext == 4 * BS and out[0]["bad"] == set()
    other = tokens(3 * BS + 1, seed=9)
    req = vs.Request("d2", other)
    cons.admit(req)
    cons.step(["d2"])
    assert cons.finish("d2") is False  # a consumer never saves
    ext, _ = prefill(prod, "p3", other)
    assert ext == 0
    prod.close()
    cons.close()


def test_namespaces():
    """A cache salt or a LoRA adapter puts a request's pages apart."""
    store = kvl.Store("mem:")
    eng = engine(store, "flash")
    toks = tokens(3 * BS + 1, seed=10)
    prefill(eng, "a", toks, cache_salt="tenant-a")
    assert prefill(eng, "b", toks)[0] == 0
    assert prefill(eng, "c", toks, cache_salt="tenant-b")[0] == 0
    assert prefill(eng, "d", toks, cache_salt="tenant-a")[0] == 3 * BS
    lora = vs.LoRARequest("adapter-1")
    assert prefill(eng, "e", toks, lora_request=lora)[0] == 0
    assert prefill(eng, "f", toks, lora_request=lora)[0] == 3 * BS
    eng.close()


@pytest.mark.parametrize("seed", range(4))
def test_load_errors_exact_under_faults(seed):
    """A store failing and corrupting reads at random: every block not
    reported holds the right bytes, and every block with wrong bytes is
    reported."""
    store = kvl.Store(f"fault+mem:?fault.error=0.05&fault.corrupt=0.05"
                      f"&fault.seed={seed}")
    eng = engine(store, "flash", tp=2)
    base = tokens(6 * BS, seed=seed)
    prefill(eng, "w", base + [1])
    reported = 0
    for i in range(12):
        req = vs.Request(f"r{i}", base[:(2 + i % 5) * BS] + [i + 2])
        eng.admit(req)
        for r in eng.step([req.request_id]):
            assert r["bad"] <= r["invalid"], (r["bad"], r["invalid"])
            reported += len(r["invalid"])
        eng.finish(req.request_id)
        eng.drain()
    assert reported > 0  # the faults did hit some loads
    eng.close()


def test_store_down_and_bad_config():
    """A store that cannot be reached: vLLM runs without it (no hits, no
    saves kept); bad extra config and unsupported models are refused."""
    cfg, kcc = model("flash", extra={"store": "redis://127.0.0.1:1",
                                     "reconnect_s": 60})
    if kvl.has_feature("redis"):
        eng = Engine(cfg, kcc, [Worker(cfg, kcc, 0)])
        toks = tokens(2 * BS + 1, seed=11)
        assert eng.admit(vs.Request("x", toks)) == 0
        eng.step(["x"])
        assert eng.finish("x") is False
        eng.close()
    with pytest.raises(ValueError, match="unknown keys"):
        engine("mem:", extra={"stor": 1})
    with pytest.raises(ValueError, match="load_timeout_s"):
        engine("mem:", extra={"load_timeout_s": "soon"})
    for key, bad in (("gpu_copy", "fast"), ("gpu_staging", -1)):
        with pytest.raises(ValueError, match=key):
            engine("mem:", extra={key: bad})
    with pytest.raises(kvl.KvlinkError):
        engine("nosuch://x")
    cfg, kcc = model("flash", extra={"store": "mem:"})
    kcc.kv_cache_groups.append(kcc.kv_cache_groups[0])
    with pytest.raises(ValueError, match="hybrid"):
        Engine(cfg, kcc, [])
    # The workers' layout differs from the one the scheduler expects.
    vs.KV_LAYOUT[0] = "HND"
    cfg, kcc = model("flash", extra={"store": "mem:", "kv_layout": "NHD"})
    with pytest.raises(ValueError, match="HND"):
        Worker(cfg, kcc, 0)


def test_remote_processes():
    """The scheduler here, two tensor-parallel workers each in a process of
    its own, and a prefill and a decode instance, sharing pages through the
    store of $KVL_TEST_STORE_URI (ctest's redis_vllm: Redis, then a Redis
    Cluster)."""
    uri = os.environ.get("KVL_TEST_STORE_URI")
    if not uri:
        pytest.skip("KVL_TEST_STORE_URI is not set (ctest's redis_vllm "
                    "sets it)")
    seed = int.from_bytes(os.urandom(4), "little")
    toks = tokens(5 * BS + 1, seed=seed)

    def instance(role):
        cfg, kcc = model("flash", tp=2, role=role, extra={"store": uri})
        return Engine(cfg, kcc, [RemoteWorker(cfg, kcc, r)
                                 for r in range(2)])

    prod, cons = instance("kv_producer"), instance("kv_consumer")
    try:
        assert prefill(prod, "p", toks)[0] == 0
        ext, out = prefill(cons, "d", toks)
        assert ext == 5 * BS
        assert all(r["bad"] == set() and r["invalid"] == set() for r in out)
        # A page lost between lookup and load: exactly its blocks on.
        req = vs.Request("d2", toks)
        assert cons.admit(req) == 5 * BS
        store = kvl.Store(uri)
        shard1 = kvl.Shard(tp_rank=1, tp_size=2)
        lay = cons.sched._layout
        store.remove(lay.key("kv", kvl.hash_pages(toks, BS)[3],
                             shard=shard1))
        out = cons.step(["d2"])
        blocks = cons.reqs["d2"][1]
        assert out[0]["invalid"] == set()
        assert out[1]["invalid"] == set(blocks[3:5])
        assert all(r["bad"] <= r["invalid"] for r in out)
        cons.finish("d2")
        store.close()
    finally:
        prod.close()
        cons.close()
