# SPDX-License-Identifier: Apache-2.0
"""A driver that calls an SGLang external linker exactly as SGLang's
UnifiedCacheLinkerWrapper does, one ``Rank`` per tensor-parallel rank (ranks
may be threads: :class:`MinAllReduce` stands in for the CPU process groups
SGLang reduces over).

Per request, as the wrapper's hooks run:
  match      tail page hashes (SGLang's get_hash_str, which kvlink's
             hash_pages equals) → lookup(rid, [KV keys, SWA window keys])
             → the restorable set as a 0/1 mask → MIN all-reduce → hit;
  load_back  slots from the allocator → load(rid, [KV, SWA transfers]);
  forward    start_layer_wise_loading() → counter.set_consumer(index) →
             each layer's pool accessor waits (counter.wait_until);
  events     [num_completed_loads, num_completed_offloads] → MIN
             all-reduce → pop that many → offload results MIN-reduced;
  backup     offload([KV, SWA transfers of one node]);
  release    cancel_queued_load(rid); reset; close.

create_linker follows SGLang's linker factory: import the module, take the
class, check it is a non-abstract UnifiedCacheLinker, construct it with
(server_args, params, components=…, extra_config=deepcopy(extra)).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import threading
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import kvlink as kvl
from sglang_standins import ComponentType, install

T = install()
PoolName, PoolTransfer, PoolHitPolicy = T["PoolName"], T["PoolTransfer"], \
    T["PoolHitPolicy"]


def create_linker(config: Dict[str, Any], server_args: Any, params: Any,
                  components: Sequence[Any]) -> Any:
    """SGLang's create_unified_cache_linker, for a plugin config."""
    module = importlib.import_module(config["linker_module_path"])
    cls = getattr(module, config["linker"], None)
    if not inspect.isclass(cls) or \
            not issubclass(cls, T["UnifiedCacheLinker"]):
        raise ValueError(f"{config['linker']} is not a UnifiedCacheLinker")
    if inspect.isabstract(cls):
        raise ValueError(f"{config['linker']} is abstract: "
                         f"{sorted(cls.__abstractmethods__)}")
    return cls(server_args, params, components=set(components),
               extra_config=copy.deepcopy(config.get("linker_extra_config",
                                                     {})))


class MinAllReduce:
    """An in-place MIN all-reduce of equal-length int arrays across n
    threads (SGLang's _all_reduce_attn_groups with ReduceOp.MIN)."""

    def __init__(self, n: int, timeout: float = 30.0):
        self.n = n
        self._bar = threading.Barrier(n, timeout=timeout)
        self._mu = threading.Lock()
        self._acc: Optional[np.ndarray] = None

    def __call__(self, a: np.ndarray) -> None:
        if self.n == 1:
            return
        with self._mu:
            self._acc = a.copy() if self._acc is None else \
                np.minimum(self._acc, a)
        self._bar.wait()
        a[:] = self._acc
        if self._bar.wait() == 0:
            self._acc = None
        self._bar.wait()


class Rank:
    """One rank of an SGLang server: its pools, allocator and linker.

    ``pool_reader(layer)`` returns the bytes of every layer-`layer` buffer
    (through the pools' accessors, which wait on the counter);
    ``page_bytes(slot)`` every byte of one page slot across layers, for
    comparing what was loaded with what was offloaded."""

    def __init__(self, linker: Any, params: Any, allreduce: MinAllReduce,
                 layers: int, read_layer, window_pages: int = 0):
        self.linker = linker
        self.params = params
        self.allreduce = allreduce
        self.layers = layers
        self.read_layer = read_layer
        self.window_pages = window_pages
        self.page = params.page_size
        self.alloc = params.token_to_kv_pool_allocator
        # As SGLang's registry: the counter goes to the target pool only
        # (draft pools are read after the target's forward, never gated).
        self.alloc.get_kvcache().register_layer_transfer_counter(
            linker.layer_done_counter)
        self.hits: Dict[str, int] = {}
        self.swa_slots: Dict[str, List[int]] = {}
        self.pending_loads: Dict[str, List[int]] = {}
        self.pending_offloads: List[str] = []
        self.stored: Dict[str, bool] = {}
        self.consumer = -1

    # ------------------------------------------------------------ keys

    def tail_hashes(self, tokens: Sequence[int], prior: Optional[bytes] = None
                    ) -> List[str]:
        """SGLang's get_hash_str over the whole pages of the tail."""
        return [kvl.hash_hex(h) for h in kvl.hash_pages(tokens, self.page,
                                                       prior=prior)]

    def transfers(self, keys: List[str], kv_idx=None, swa_idx=None,
                  swa_pages: Optional[int] = None) -> List[Any]:
        """The KV transfer and, for a sliding-window model, the SWA one
        over the last swa_pages pages (default: the window's, as SGLang's
        lookups and loads take; none when 0)."""
        out = [PoolTransfer(name=PoolName.KV, keys=list(keys),
                            device_indices=kv_idx)]
        if swa_pages is None:
            swa_pages = self.window_pages
        if self.window_pages and swa_pages:
            out.append(PoolTransfer(name=PoolName.SWA,
                                    keys=list(keys[-swa_pages:]),
                                    device_indices=swa_idx,
                                    hit_policy=PoolHitPolicy.TRAILING_PAGES))
        return out

    # ----------------------------------------------------------- hooks

    def match(self, rid: str, keys: List[str]) -> int:
        """lookup + the MIN all-reduce of the restorable set: hit pages."""
        got = self.linker.lookup(rid, self.transfers(keys))
        mask = np.zeros(len(keys) + 1, dtype=np.int32)
        for p in got:
            if 0 < p <= len(keys):
                mask[p] = 1
        self.allreduce(mask)
        hit = int(np.flatnonzero(mask).max()) if mask.any() else 0
        if hit:
            self.hits[rid] = hit
        return hit

    def token_indices(self, pages: List[int]) -> np.ndarray:
        return (np.asarray(pages, dtype=np.int64)[:, None] * self.page +
                np.arange(self.page)).reshape(-1)

    def load_back(self, rid: str, keys: List[str]) -> List[int]:
        """Allocates the hit's pages (the window's last pages in the
        sliding-window index space too: swa_slots[rid]) and queues the
        load: the slots."""
        hit = self.hits.pop(rid)
        keys = keys[:hit]
        slots = self.alloc.alloc_pages(hit)
        idx = self.token_indices(slots)
        swa_idx = None
        if self.window_pages:
            swa = self.alloc.alloc_pages(min(hit, self.window_pages),
                                         swa=True)
            self.swa_slots[rid] = swa
            swa_idx = self.token_indices(swa)
        if not self.linker.load(rid, self.transfers(keys, idx, swa_idx)):
            raise RuntimeError(f"Failed to queue the linker load for "
                               f"rid={rid}")
        self.pending_loads[rid] = slots
        return slots

    def forward(self) -> List[Any]:
        """A prefill forward pass: start, then every layer's accessor."""
        self.consumer = self.linker.start_layer_wise_loading()
        self.linker.layer_done_counter.set_consumer(self.consumer)
        return [self.read_layer(layer) for layer in range(self.layers)]

    def check_events(self) -> List[bool]:
        """check_hicache_events: pops what every rank has completed."""
        counts = np.array([self.linker.num_completed_loads(),
                           self.linker.num_completed_offloads()],
                          dtype=np.int32)
        self.allreduce(counts)
        for _ in range(int(counts[0])):
            for rid in self.linker.pop_completed_load():
                self.pending_loads.pop(rid)
        results = [self.linker.pop_completed_offload()
                   for _ in range(int(counts[1]))]
        if results:
            ok = np.array(results, dtype=np.int32)
            self.allreduce(ok)
            for node, good in zip(self.pending_offloads, ok):
                self.stored[node] = bool(good)
            del self.pending_offloads[:len(results)]
        return results

    def backup(self, node: str, keys: List[str], slots: List[int],
               swa_pages: Optional[int] = None,
               swa_slots: Optional[List[int]] = None) -> bool:
        """BackupKV of one node (its own pages, not its ancestors'):
        offload them. A sliding-window node offloads the SWA data of the
        last swa_pages of its pages, those it still holds (default: all),
        from swa_slots, SGLang's SWA indices (default: the same numbers as
        those pages' full slots)."""
        idx = self.token_indices(slots)
        swa_idx = None
        if swa_pages is None:
            swa_pages = len(keys)
        if self.window_pages and swa_pages:
            if swa_slots is None:
                swa_slots = slots[-swa_pages:]
            swa_idx = self.token_indices(swa_slots)
        ok = self.linker.offload(self.transfers(keys, idx, swa_idx,
                                                swa_pages))
        if ok:
            self.pending_offloads.append(node)
        return ok

    def drain(self, timeout: float = 30.0) -> None:
        """check_events until nothing is pending (every rank calls it)."""
        import time
        deadline = time.monotonic() + timeout
        while True:
            self.check_events()
            # MIN of the negated counts: minus the most any rank has left.
            left = np.array([-(len(self.pending_loads) +
                               len(self.pending_offloads))], dtype=np.int32)
            self.allreduce(left)
            if left[0] == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("linker completions never came")
            time.sleep(0.005)


def run_ranks(n: int, fn) -> List[Any]:
    """fn(rank_index) on n threads; their results, re-raising the first
    failure."""
    out: List[Any] = [None] * n
    err: List[BaseException] = []

    def main(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            err.append(e)

    threads = [threading.Thread(target=main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if err:
        raise err[0]
    return out


__all__ = ["create_linker", "MinAllReduce", "Rank", "run_ranks",
           "ComponentType", "PoolName", "PoolTransfer", "PoolHitPolicy"]
