#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sglang_transformer.py — a real transformer's KV restored through
kvlink.sglang, the linker SGLang loads with
--unified-cache-external-linker-config, driven as SGLang drives it.

A small Llama model (transformers, built from a config and a seed, as
e2e_transformer.py does) prefills a prompt. Its KV is written into an
SGLang-shaped MHA pool (per layer K and V [tokens + page, kv_heads,
head_dim], the shape of SGLang's MHATokenToKVPool) of server A, whose
linker offloads the prompt's pages (one BackupKV node). Server B, with a
fresh pool filled with NaN and its own linker on the same store, matches
the prompt (lookup → the restorable set → hit), loads the hit back and
prefills only the uncached tail: before each decoder layer runs, the pool's
accessor waits on the linker's layer counter (on the GPU: a wait enqueued
on the compute stream), and the layer's restored KV goes into the model's
cache. Then a few greedy steps. Full recomputation is the reference:
fp32 logits within 1e-5, bf16 the same greedy tokens.

SGLang's types come from SGLang when it is installed, else from the
stand-ins kvlink's tests use (python/tests/sglang_standins.py). The pool is
on the GPU when there is one and kvlink has CUDA. Needs torch and
transformers. Last line: "PASS …" or "FAIL …" (exit status 0 only on PASS).

    python3 examples/sglang_transformer.py
    python3 examples/sglang_transformer.py --device cpu --dtype fp32
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python"),
                os.path.join(HERE, "..", "python", "tests")]

import e2e_transformer as e2e  # noqa: E402  (the model and its helpers)


def server(args, dtype, device, store, fill):
    """An SGLang rank: an MHA pool, its allocator and the linker SGLang's
    factory builds from the external-linker config."""
    import torch
    import sglang_standins as sg
    from sglang_driver import ComponentType, MinAllReduce, Rank, \
        create_linker
    ps = args.page_size
    slots = 4 * args.pages + 8
    head_dim = args.hidden // args.heads

    def alloc(shape, _dtype=None):
        return torch.full(shape, fill, dtype=e2e.torch_dtype(dtype),
                          device=device)

    kv = sg.MHATokenToKVPool((slots - 1) * ps, ps, e2e.torch_dtype(dtype),
                             args.kv_heads, head_dim, args.layers, alloc)
    params = sg.CacheInitParams(
        token_to_kv_pool_allocator=sg.TokenAllocator(kv, slots),
        page_size=ps)
    config = {"linker": "KvlinkLinker", "linker_module_path": "kvlink.sglang",
              "linker_extra_config": {"store": store,
                                      "model_tag": f"e2e-llama/{dtype}"}}
    linker = create_linker(config, sg.ServerArgs(), params,
                           [ComponentType.FULL])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return kv, Rank(linker, params, MinAllReduce(1), args.layers,
                    lambda layer: None)


def rows(rank, slots, device):
    import torch
    return torch.as_tensor(rank.token_indices(slots), device=device)


def run(args, dtype):
    import torch
    import kvlink as kvl
    device, _, _ = e2e.resolve(args)
    if device.type == "cuda" and not kvl.has_feature("cuda"):
        device = torch.device("cpu")  # kvlink cannot write GPU pools
    ps = args.page_size
    model, _ = e2e.build_model(args, dtype, device)
    prompt = e2e.prompt_tokens(args)
    store = kvl.Store("mem:?capacity=256MiB")
    checks = {}

    # Server A: prefill, write the KV into its pool, offload the node.
    kv_a, a = server(args, dtype, device, store, 0.0)
    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        ref = model(input_ids=ids, past_key_values=e2e.new_cache(),
                    use_cache=True)
        ref_kv = [(k.clone(), v.clone())
                  for k, v in e2e.cache_layers(ref.past_key_values)]
        ref_logits, ref_tokens = e2e.greedy(model, ref.past_key_values,
                                            ref.logits[0, -1], args.steps)
    keys = a.tail_hashes(prompt)
    a_slots = a.alloc.alloc_pages(len(keys))
    idx = rows(a, a_slots, device)
    n = len(keys) * ps
    for layer, (k, v) in enumerate(ref_kv):
        kv_a.k_buffer[layer][idx] = k[0, :, :n].transpose(0, 1)
        kv_a.v_buffer[layer][idx] = v[0, :, :n].transpose(0, 1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    checks["offload_queued"] = a.backup("prompt", keys, a_slots)
    a.drain(60)
    checks["offload_stored"] = a.stored.get("prompt") is True

    # Server B: match, load back, prefill the tail over the restored KV.
    kv_b, b = server(args, dtype, device, store, float("nan"))
    hit = b.match("req", keys)
    use = min(hit, (len(prompt) - 1) // ps)  # keep a token to compute
    checks["lookup_hits_every_page"] = hit == len(keys)
    b.hits["req"] = use
    b_slots = b.load_back("req", keys)
    b_idx = rows(b, b_slots, device)
    cache = e2e.new_cache()
    waited = []

    def fill(layer):
        t0 = time.perf_counter()
        kv_b.get_key_buffer(layer)  # waits on the linker's layer counter
        waited.append((time.perf_counter() - t0) * 1e3)
        k = kv_b.k_buffer[layer][b_idx].transpose(0, 1).unsqueeze(0)
        v = kv_b.v_buffer[layer][b_idx].transpose(0, 1).unsqueeze(0)
        cache.update(k.contiguous(), v.contiguous(), layer)

    layers = model.model.layers
    t0 = time.perf_counter()
    consumer = b.linker.start_layer_wise_loading()
    b.linker.layer_done_counter.set_consumer(consumer)
    hooks = [layers[i].register_forward_pre_hook(
        lambda m, x, i=i: fill(i)) for i in range(1, len(layers))]
    with torch.no_grad():
        fill(0)
        tail = torch.tensor([prompt[use * ps:]], device=device)
        out = model(input_ids=tail, past_key_values=cache, use_cache=True)
        for h in hooks:
            h.remove()
        got_logits, _ = e2e.greedy(model, out.past_key_values,
                                   out.logits[0, -1], args.steps,
                                   feed=ref_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    restore_ms = (time.perf_counter() - t0) * 1e3
    b.drain(60)
    checks["load_completed"] = not b.linker.failed_loads
    diffs = [float((x - y).abs().max()) for x, y in zip(got_logits,
                                                          ref_logits)]
    same = [int(g.argmax()) for g in got_logits[:-1]] == ref_tokens
    checks["logits_finite"] = all(bool(torch.isfinite(g).all())
                                  for g in got_logits)
    if dtype == "fp32":
        checks[f"fp32_logits_within_{e2e.FP32_TOL:g}"] = \
            max(diffs) <= e2e.FP32_TOL
    checks["same_greedy_tokens"] = same
    print(f"[{dtype}] pool {tuple(kv_b.k_buffer[0].shape)} on "
          f"{kv_b.k_buffer[0].device}; lookup {hit}/{len(keys)} pages, "
          f"restored {use}; tail {tail.shape[1]} tokens; waits per layer "
          f"(ms): {', '.join(f'{w:.2f}' for w in waited)}; restore + tail "
          f"+ {args.steps} steps {restore_ms:.1f} ms; logits vs full "
          f"recomputation: max abs diff {max(diffs):.3g}; greedy tokens "
          f"{'identical' if same else 'DIFFER'}", flush=True)
    for r in (a, b):
        r.linker.close()
    return [k for k, v in checks.items() if not v]


def main(argv=None):
    args = e2e.parse_args(argv)  # --help needs neither torch nor SGLang
    import importlib.util
    missing = [m for m in ("torch", "transformers")
               if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIP: no {', '.join(missing)}")
        return 77
    _, dtypes, _ = e2e.resolve(args)
    bad = []
    for dtype in dtypes:
        bad += [f"{dtype}: {b}" for b in run(args, dtype)]
    print("PASS sglang_transformer" if not bad else
          "FAIL sglang_transformer: " + ", ".join(bad))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
