#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench_sglang.py — kvlink.sglang on a GPU, driven as SGLang drives its
external linker (python/tests/sglang_driver.py), over SGLang-shaped CUDA
pools: per-layer K and V tensors [tokens + page, kv_heads, head_dim].

Default: a Llama-3-8B-shaped cache (32 layers, 8 KV heads x 128, bf16,
page 16: 32 KiB per page, layer and component), a 32K-token prefix: 4 GiB,
in the embedded store in pinned, mapped memory. In one run:

  ceiling   pinned host → GPU cudaMemcpy of 1 GiB (best of 3): the PCIe
            line rate the ratios below are taken against;
  offload   the prefix, node by node (2048 tokens each), from GPU slots
            into the store (offload → FIFO results);
  load      match (lookup + the ranks' MIN all-reduce) → load_back → one
            forward pass that only waits per layer (the counter's stream
            waits): bytes / (start → last layer) vs the ceiling, best of
            --reps; and the restore's time from match on;
  overlap   the same load under a forward pass whose layers run GEMMs that
            fill the GPU (--compute-ms in all), each layer after its wait:
            time / max(load alone, compute alone);
  bytes     every restored page of every layer equals the source's.

Needs torch with CUDA and a kvlink built with CUDA. Prints one line per
figure and, with --json FILE, writes them as JSON. Exit 0 only when every
byte matched; 77 when there is no GPU.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"),
                os.path.join(HERE, "..", "python", "tests")]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--node-tokens", type=int, default=2048)
    ap.add_argument("--compute-ms", type=float, default=95.0,
                    help="GEMM time of the overlapped forward pass")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--store", default="mem:?capacity=6GiB&prealloc=1")
    ap.add_argument("--gpu-copy", default="auto",
                    choices=("auto", "kernel", "dma"),
                    help="the linker's gpu_copy (kvlink.GpuCopy)")
    ap.add_argument("--json")
    return ap.parse_args()


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: no torch")
        return 77
    import kvlink as kvl
    if not torch.cuda.is_available() or not kvl.has_feature("cuda"):
        print("SKIP: needs a GPU and a kvlink built with CUDA")
        return 77
    import sglang_standins as sg
    from sglang_driver import ComponentType, MinAllReduce, Rank, \
        create_linker

    ps, L = args.page, args.layers
    pages = args.tokens // ps
    slots = 2 * pages + 2  # room for two loads of the prefix, page 0 kept
    size = (slots - 1) * ps
    dev = torch.device("cuda")
    shape = (args.kv_heads, args.head_dim)
    bytes_total = 2 * L * pages * ps * args.kv_heads * args.head_dim * 2

    def alloc_random(seed):
        g = torch.Generator(device=dev).manual_seed(seed)

        def alloc(shp, dtype="bfloat16"):
            t = torch.empty(shp, dtype=torch.bfloat16, device=dev)
            t.view(torch.int16).random_(-32768, 32767, generator=g)
            return t
        return alloc

    def alloc_zero(shp, dtype="bfloat16"):
        return torch.zeros(shp, dtype=torch.bfloat16, device=dev)

    store = kvl.Store(args.store)

    def server(alloc):
        kv = sg.MHATokenToKVPool(size, ps, torch.bfloat16, *shape, L, alloc)
        params = sg.CacheInitParams(
            token_to_kv_pool_allocator=sg.TokenAllocator(kv, slots),
            page_size=ps)
        cfg = {"linker": "KvlinkLinker", "linker_module_path": "kvlink.sglang",
               "linker_extra_config": {"store": store,
                                       "gpu_copy": args.gpu_copy}}
        lk = create_linker(cfg, sg.ServerArgs(), params,
                           [ComponentType.FULL])

        def read(layer):
            kv.get_key_buffer(layer)
            kv.get_value_buffer(layer)
        return kv, Rank(lk, params, MinAllReduce(1), L, read)

    src_kv, src = server(alloc_random(1))
    dst_kv, dst = server(alloc_zero)
    torch.cuda.synchronize()
    out = {"device": torch.cuda.get_device_name(), "layers": L,
           "gpu_copy": args.gpu_copy,
           "tokens": pages * ps, "page_size": ps,
           "chunk_bytes": ps * args.kv_heads * args.head_dim * 2,
           "bytes": bytes_total}

    # The PCIe ceiling, same run.
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        gpu.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    ceiling = (1 << 30) / best
    del host, gpu
    out["ceiling_GBps"] = ceiling / 1e9

    # Offload the prefix node by node.
    tokens = [int(t) for t in torch.randint(0, 32000, (pages * ps,))]
    keys = src.tail_hashes(tokens)
    src_slots = src.alloc.alloc_pages(pages)
    per = args.node_tokens // ps
    t0 = time.perf_counter()
    for i in range(0, pages, per):
        assert src.backup(f"n{i}", keys[i:i + per], src_slots[i:i + per])
    src.drain(600)
    t_off = time.perf_counter() - t0
    assert all(src.stored.values()), "an offload failed"
    out["offload_GBps"] = bytes_total / t_off / 1e9

    def restore(compute=None):
        """One match → load_back → forward: (seconds from match to the
        last layer, from start to the last layer, of match + load_back;
        the slots)."""
        dst.alloc.free_pages = list(range(1, slots))
        rid = f"r{time.perf_counter_ns()}"
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        hit = dst.match(rid, keys)
        assert hit == pages, f"lookup found {hit} of {pages} pages"
        got = dst.load_back(rid, keys)
        t1 = time.perf_counter()
        consumer = dst.linker.start_layer_wise_loading()
        dst.linker.layer_done_counter.set_consumer(consumer)
        for layer in range(L):
            dst_kv.get_key_buffer(layer)
            if compute is not None:
                compute(layer)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        dst.drain(60)
        assert not dst.linker.failed_loads, dst.linker.failed_loads
        return t2 - t0, t2 - t1, t1 - t0, got

    t_restore, t_load, t_prep, dst_slots = min(
        restore() for _ in range(args.reps))
    out["restore_ms"] = t_restore * 1e3
    out["load_ms"] = t_load * 1e3
    out["match_and_load_back_ms"] = t_prep * 1e3
    out["load_ratio"] = bytes_total / t_load / ceiling

    # GEMMs that fill the GPU, sized to compute_ms over all layers.
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    per_gemm = (time.perf_counter() - t0) / 10
    reps = max(1, round(args.compute_ms / 1e3 / L / per_gemm))

    def compute(layer):
        for _ in range(reps):
            torch.matmul(a, b, out=c)

    def compute_alone():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for layer in range(L):
            compute(layer)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    t_comp = min(compute_alone() for _ in range(args.reps))
    _, t_both, _, dst_slots = min(
        (restore(compute) for _ in range(args.reps)), key=lambda r: r[1])
    out["compute_ms"] = t_comp * 1e3
    out["overlap_ms"] = t_both * 1e3
    # Against the load's own start → last layer (what a forward overlaps).
    out["overlap_ratio"] = t_both / max(t_load, t_comp)

    # Every byte of the last restore.
    torch.cuda.synchronize()
    s_idx = dst.token_indices(src_slots)
    d_idx = dst.token_indices(dst_slots)
    s_idx, d_idx = (torch.as_tensor(x, device=dev) for x in (s_idx, d_idx))
    bad = 0
    for layer in range(L):
        for sb, db in ((src_kv.k_buffer, dst_kv.k_buffer),
                       (src_kv.v_buffer, dst_kv.v_buffer)):
            # As integers: random bits are NaNs too, which never compare.
            if not torch.equal(
                    sb[layer].index_select(0, s_idx).view(torch.int16),
                    db[layer].index_select(0, d_idx).view(torch.int16)):
                bad += 1
    out["layers_with_wrong_bytes"] = bad

    print(f"kvlink.sglang bench on {out['device']}: {L} layers x "
          f"{out['tokens']} tokens ({bytes_total / 2**30:.2f} GiB), page "
          f"{ps} ({out['chunk_bytes'] // 1024} KiB chunks), store "
          f"{args.store}")
    print(f"ceiling  {out['ceiling_GBps']:.1f} GB/s pinned host -> GPU")
    print(f"offload  {out['offload_GBps']:.1f} GB/s "
          f"({out['offload_GBps'] * 1e9 / ceiling:.3f} of the ceiling)")
    print(f"load     {out['load_ms']:.1f} ms, {out['load_ratio']:.3f} of "
          f"the ceiling (start -> last layer); restore (match -> last "
          f"layer) {out['restore_ms']:.1f} ms, of which match + load_back "
          f"{out['match_and_load_back_ms']:.1f} ms")
    print(f"overlap  {out['overlap_ms']:.1f} ms with {out['compute_ms']:.1f} "
          f"ms of GEMMs: {out['overlap_ratio']:.3f} x max(load, compute)")
    print(f"bytes    {'all equal' if not bad else f'{bad} layer buffers differ'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    for r in (src, dst):
        r.linker.close()
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
