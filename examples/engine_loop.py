#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""engine_loop.py — an inference engine's loop around kvlink, step by step.

A toy engine with a paged KV pool (numpy, or torch when it is importable):

1. request A arrives: prefill writes its KV pages into pool slots;
2. its whole pages are offloaded to the store in the background;
3. A finishes and its slots are freed (and wiped, so nothing is left over);
4. request B arrives, sharing A's system prompt: its pages are hashed and
   looked up — the shared prefix is restorable;
5. B's prefix is loaded into fresh slots layer by layer while the "forward
   pass" runs: before computing layer l, the engine waits for layer l;
6. the restored pages are compared with what prefill would have computed.

The "model" is a deterministic function of (layer, position, token), so
recomputation is cheap and exact. Run it from a kvlink checkout after
building (`make`), or with KVLINK_LIBRARY=/path/to/libkvlink.so:

    python3 examples/engine_loop.py [--backend numpy|torch] [--store URI]
"""

import argparse
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import kvlink as kvl  # noqa: E402

LAYERS, KV_HEADS, HEAD_DIM, PAGE_SIZE, SLOTS = 8, 4, 32, 16, 64


# ------------------------------------------------------------- the toy model

class Backend:
    """The few array operations the engine needs, in numpy or torch."""

    def __init__(self, name):
        self.name = name
        self.cuda = False
        if name == "torch":
            import torch
            self.torch = torch
            self.cuda = torch.cuda.is_available() and kvl.has_feature("cuda")
            self.device = "cuda" if self.cuda else "cpu"
        else:
            import numpy
            self.np = numpy

    def zeros(self, shape):
        if self.name == "torch":
            return self.torch.zeros(shape, dtype=self.torch.float16,
                                    device=self.device)
        return self.np.zeros(shape, dtype=self.np.float16)

    def prefill_kv(self, tokens, start):
        """K and V of tokens[start:] at positions start…: [layers, 2, n,
        heads, dim]. Deterministic in (layer, position, token)."""
        import numpy as np
        n = len(tokens) - start
        pos = np.arange(start, len(tokens), dtype=np.float32)
        tok = np.asarray(tokens[start:], dtype=np.float32)
        lay = np.arange(LAYERS, dtype=np.float32)[:, None, None, None, None]
        kv = np.arange(2, dtype=np.float32)[None, :, None, None, None]
        h = np.arange(KV_HEADS * HEAD_DIM, dtype=np.float32).reshape(
            1, 1, 1, KV_HEADS, HEAD_DIM)
        x = np.sin(tok[None, None, :, None, None] * 0.37 + h * 0.11 +
                   lay * 1.3 + kv * 0.7) * np.cos(
            pos[None, None, :, None, None] * 0.05)
        out = x.astype(np.float16).reshape(LAYERS, 2, n, KV_HEADS, HEAD_DIM)
        if self.name == "torch":
            return self.torch.from_numpy(out).to(self.device)
        return out

    def equal(self, a, b):
        if self.name == "torch":
            return bool(self.torch.equal(a, b))
        return bool((a == b).all())

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


class Engine:
    def __init__(self, backend, store):
        self.b = backend
        # The paged pool: [layers, K/V, slots, page_size, heads, dim].
        self.pool = backend.zeros((LAYERS, 2, SLOTS, PAGE_SIZE, KV_HEADS,
                                   HEAD_DIM))
        layout = kvl.Layout("toy-model/fp16", PAGE_SIZE)
        layout.add_kv_cache(self.pool, "LCP")  # one call for the whole pool
        self.linker = kvl.Linker(layout.finalize(), store)
        self.free = list(range(SLOTS))
        self.next_id = 1

    def alloc(self, n):
        slots, self.free = self.free[:n], self.free[n:]
        return slots

    def release(self, slots):
        for s in slots:
            self.pool[:, :, s] = 0  # wipe, so a restore cannot be faked
        self.free += slots

    def write_pages(self, kv, slots):
        """Writes whole pages of kv ([layers, 2, tokens, …]) into slots."""
        for i, s in enumerate(slots):
            self.pool[:, :, s] = kv[:, :, i * PAGE_SIZE:(i + 1) * PAGE_SIZE]

    def request_id(self):
        self.next_id += 1
        return self.next_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["auto", "numpy", "torch"],
                    default="auto")
    ap.add_argument("--store", default="mem:?capacity=256MiB")
    args = ap.parse_args()
    name = args.backend
    if name == "auto":
        name = "torch" if importlib.util.find_spec("torch") else "numpy"
    b = Backend(name)
    print(f"kvlink {kvl.version()} ({kvl.library_path}); pool in {name}"
          f"{' on CUDA' if b.cuda else ' on the CPU'}; store {args.store}")

    store = kvl.Store(args.store)
    eng = Engine(b, store)
    lk = eng.linker

    # ---- 1. request A: prefill ------------------------------------------
    system = [(7 * i + 3) % 1000 for i in range(5 * PAGE_SIZE)]  # 5 pages
    prompt_a = system + [(11 * i) % 1000 for i in range(2 * PAGE_SIZE + 5)]
    kv_a = b.prefill_kv(prompt_a, 0)
    pages_a = kvl.hash_pages(prompt_a, PAGE_SIZE)  # whole pages only: 7
    slots_a = eng.alloc(len(pages_a))
    eng.write_pages(kv_a, slots_a)
    print(f"A: {len(prompt_a)} tokens, {len(pages_a)} whole pages "
          f"prefilled into slots {slots_a[0]}..{slots_a[-1]}")

    # ---- 2. offload A's pages in the background --------------------------
    id_a = eng.request_id()
    b.sync()  # on a GPU: or lk.offload(…, event=ev) with a CUDA event
    lk.offload(id_a, pages_a, slots_a)
    lk.flush(timeout=10)
    done = lk.poll_until([id_a], timeout=10)[id_a]
    print(f"A: offload {done.status_name}, {done.valid_pages}/"
          f"{done.n_pages} pages stored")

    # ---- 3. A leaves the GPU ---------------------------------------------
    eng.release(slots_a)

    # ---- 4. request B shares the system prompt: lookup --------------------
    prompt_b = system + [(13 * i + 1) % 1000 for i in range(3 * PAGE_SIZE)]
    pages_b = kvl.hash_pages(prompt_b, PAGE_SIZE)
    t0 = time.perf_counter()
    hit = lk.lookup(pages_b)
    print(f"B: {len(pages_b)} pages, lookup says {hit} restorable "
          f"({(time.perf_counter() - t0) * 1e6:.0f} us)")
    assert hit == 5, hit

    # ---- 5. load the prefix layer by layer while computing ----------------
    id_b = eng.request_id()
    slots_b = eng.alloc(len(pages_b))
    lk.load(id_b, pages_b[:hit], slots_b[:hit])
    batch = lk.start()  # once per forward pass, for every queued load
    kv_new = b.prefill_kv(prompt_b, hit * PAGE_SIZE)  # the uncached tail
    for layer in range(lk.layers):
        if b.cuda:
            lk.wait_stream(batch, layer)  # the GPU waits, not the CPU
        else:
            lk.wait(batch, layer, timeout=10)
        # "attention" of this layer may now read the restored pages
        # and prefill writes the pages that were not cached
        for i, s in enumerate(slots_b[hit:]):
            eng.pool[layer, :, s] = kv_new[layer, :, i * PAGE_SIZE:
                                           (i + 1) * PAGE_SIZE]
    b.sync()
    done = lk.poll_until([id_b], timeout=10)[id_b]
    print(f"B: load {done.status_name}, {done.valid_pages}/{done.n_pages} "
          f"pages valid; the forward pass waited for each of "
          f"{lk.layers} layers")

    # ---- 6. compare with a full recomputation -----------------------------
    ref = b.prefill_kv(prompt_b, 0)
    ok = all(b.equal(eng.pool[:, :, s], ref[:, :, i * PAGE_SIZE:
                                             (i + 1) * PAGE_SIZE])
             for i, s in enumerate(slots_b[:len(pages_b)]))
    st = lk.stats_json()["linker"]
    print(f"stats: {st['lookups']} lookups, {st['hit_pages']} hit pages, "
          f"{st['loaded_pages']} loaded, {st['offloaded_pages']} offloaded")
    lk.close()
    store.close()
    print("PASS: restored pages equal recomputation" if ok else
          "FAIL: restored pages differ from recomputation")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
