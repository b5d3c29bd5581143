# SPDX-License-Identifier: Apache-2.0
"""A driver that plays vLLM's scheduler and its GPU workers around a KV
connector, as vLLM's Scheduler and model runner call it, step by step.

Scheduler (one object, the engine core's):
  get_num_new_matched_tokens(request, local) → allocate the request's
  blocks → update_state_after_alloc(request, blocks, external) →
  build_connector_meta(scheduler_output) once per step; request_finished
  when a request ends (True: its blocks stay until every worker reports the
  save done in get_finished's first set).
Worker (one per tensor-parallel rank; in this process, or each in a
process of its own, commanded through a pipe):
  register_kv_caches once; per step bind_connector_metadata →
  start_load_kv → per layer: wait_for_layer_load, the layer's attention
  (here: the new tokens' KV written into their blocks), save_kv_layer →
  wait_for_save → get_finished → get_block_ids_with_load_errors →
  clear_connector_metadata.

The KV of a block is a pure function of the tokens up to its end, the
layer, the component and the rank (kv_block), as a model's would be, so a
worker checks every block a load wrote: ``bad`` in a step's result lists
the blocks whose bytes are not what the tokens make, which the connector
must have reported as load errors.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import inspect
import multiprocessing
import types
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

import vllm_standins as vs

T = vs.install()
SCHEDULER, WORKER = T["KVConnectorRole"].SCHEDULER, T["KVConnectorRole"].WORKER


def create_connector(vllm_config: Any, role: Any,
                     kv_cache_config: Any) -> Any:
    """vLLM's KVConnectorFactory for a kv_connector_module_path."""
    tc = vllm_config.kv_transfer_config
    module = importlib.import_module(tc.kv_connector_module_path)
    cls = getattr(module, tc.kv_connector)
    if not (inspect.isclass(cls) and
            issubclass(cls, T["KVConnectorBase_V1"])):
        raise ValueError(f"{tc.kv_connector} is not a KVConnectorBase_V1")
    return cls(vllm_config, role, kv_cache_config)


def model(backend: str = "flash", layers: int = 3, block_size: int = 4,
          heads: int = 2, head_size: int = 8, num_blocks: int = 64,
          tp: int = 1, role: str = "kv_both", extra: Optional[dict] = None,
          dtype: str = "float16", pp: int = 1, stage: int = 0
          ) -> Tuple[Any, Any]:
    """(vllm_config, kv_cache_config) of a small model: the KV cache config
    of pipeline stage `stage` (the scheduler gets stage 0's, as vLLM's)."""
    start, end = vs.get_pp_indices(layers, stage, pp)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(start, end)]
    spec_cls = vs.MLAAttentionSpec if backend == "mla" else \
        vs.FullAttentionSpec
    spec = spec_cls(block_size, 1 if backend == "mla" else heads,
                    head_size, dtype)
    kcc = vs.KVCacheConfig(
        num_blocks, [vs.KVCacheTensor(spec.page_size_bytes * num_blocks, [n])
                     for n in names],
        [vs.KVCacheGroupSpec(names, spec)])
    cfg = vs.VllmConfig(
        vs.KVTransferConfig(kv_role=role,
                            kv_connector_extra_config=dict(extra or {})),
        vs.CacheConfig(block_size), vs.ParallelConfig(tp, pp),
        vs.ModelConfig(hf_config=vs.HFConfig(layers)))
    cfg.backend = backend  # what the workers allocate (not vLLM's field)
    return cfg, kcc


def kv_block(tokens: Sequence[int], layer: int, comp: int, rank: int,
             shape: Tuple[int, ...], dtype: str) -> np.ndarray:
    """The KV of the block that ends tokens: a function of all of them."""
    h = hashlib.sha256(np.asarray(tokens, np.int64).tobytes() +
                       bytes([layer, comp, rank])).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    return rng.integers(0, 1000, shape).astype(dtype)


class Worker:
    """One rank's KV caches, in vLLM's layout for `backend`, and its
    connector."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any, rank: int,
                 device: str = "cpu", stage: int = 0):
        self.cfg, self.kcc, self.rank = vllm_config, kv_cache_config, rank
        self.backend = vllm_config.backend
        group = kv_cache_config.kv_cache_groups[0]
        spec = group.kv_cache_spec
        self.bs, self.dtype = spec.block_size, spec.dtype
        nb = kv_cache_config.num_blocks
        self.names = list(group.layer_names)
        self.device = device
        hnd = vs.KV_LAYOUT[0] == "HND"

        def alloc(shape, order=None):
            """A tensor of `shape` whose memory is in `order` (a
            permutation of its dimensions, slowest first)."""
            order = tuple(order or range(len(shape)))
            phys = [shape[i] for i in order]
            inv = np.argsort(order).tolist()
            if device == "cpu":
                return np.zeros(phys, self.dtype).transpose(inv)
            import torch
            return torch.zeros(phys, dtype=getattr(torch, self.dtype),
                               device=device).permute(*inv)

        h, d = spec.num_kv_heads, spec.head_size
        self.kv: Dict[str, Any] = {}
        for n in self.names:
            if self.backend == "flash":
                self.kv[n] = alloc((2, nb, self.bs, h, d),
                                   (0, 1, 3, 2, 4) if hnd else None)
            elif self.backend == "flashinfer":
                self.kv[n] = alloc((nb, 2, self.bs, h, d),
                                   (0, 1, 3, 2, 4) if hnd else None)
            else:  # mla
                self.kv[n] = alloc((nb, self.bs, d))
        # An MLA latent is the same on every tensor-parallel rank.
        self.kv_rank = 0 if self.backend == "mla" else rank
        vs.TP_RANK[0], vs.PP_RANK[0] = rank, stage
        self.conn = create_connector(vllm_config, WORKER, kv_cache_config)
        self.conn.register_kv_caches(self.kv)

    def _blocks(self, name: str, block: int) -> List[Any]:
        t = self.kv[name]
        if self.backend == "flash":
            return [t[0, block], t[1, block]]
        if self.backend == "flashinfer":
            return [t[block, 0], t[block, 1]]
        return [t[block]]

    def _host(self, x: Any) -> np.ndarray:
        if hasattr(x, "cpu"):
            return x.cpu().numpy()
        return np.asarray(x)

    def step(self, meta: Any, reqs: Dict[str, Tuple[List[int], List[int]]],
             compute: Sequence[Tuple[str, int, int]],
             finished: Set[str]) -> Dict[str, Any]:
        """One forward pass. reqs: req_id → (tokens, block ids); compute:
        (req_id, first block, blocks) whose KV this pass computes. Returns
        the connector's outputs and the loaded blocks with wrong bytes."""
        c = self.conn
        c.bind_connector_metadata(meta)
        c.start_load_kv(types.SimpleNamespace(no_compile_layers={}))
        bad: Set[int] = set()
        for name in self.names:
            layer = int(name.split(".")[2])  # model.layers.<n>.…
            c.wait_for_layer_load(name)
            for t in meta.loads:
                tokens, blocks = reqs[t.req_id]
                for b in t.block_ids:
                    i = blocks.index(b)
                    end = tokens[:(i + 1) * self.bs]
                    for comp, got in enumerate(self._blocks(name, b)):
                        want = kv_block(end, layer, comp, self.kv_rank,
                                        tuple(got.shape), self.dtype)
                        if not np.array_equal(self._host(got), want):
                            bad.add(b)
            for req_id, first, n in compute:
                tokens, blocks = reqs[req_id]
                for i in range(first, first + n):
                    end = tokens[:(i + 1) * self.bs]
                    for comp, dst in enumerate(self._blocks(name,
                                                            blocks[i])):
                        v = kv_block(end, layer, comp, self.kv_rank,
                                     tuple(dst.shape), self.dtype)
                        if hasattr(dst, "copy_"):
                            import torch
                            dst.copy_(torch.from_numpy(v))
                        else:
                            dst[...] = v
            c.save_kv_layer(name, self.kv[name], None)
        c.wait_for_save()
        sent, recving = c.get_finished(set(finished))
        invalid = c.get_block_ids_with_load_errors()
        c.clear_connector_metadata()
        return {"sent": set(sent or ()), "recving": recving,
                "invalid": set(invalid), "bad": bad}

    def close(self) -> None:
        self.conn.shutdown()


def _worker_main(conn: Any, args: Tuple[Any, ...]) -> None:
    """A worker process: builds a Worker, then runs the commands it gets
    (("step", …) → its result; ("close",))."""
    try:
        w = Worker(*args)
        conn.send(("ok", None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", repr(e)))
        return
    while True:
        cmd = conn.recv()
        if cmd[0] == "close":
            w.close()
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", w.step(*cmd[1:])))
        except BaseException as e:  # noqa: BLE001
            conn.send(("error", repr(e)))


class RemoteWorker:
    """A Worker in a process of its own (spawned), over a pipe."""

    def __init__(self, *args: Any):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker_main, args=(child, args),
                                 daemon=True)
        self._proc.start()
        self._result()

    def _result(self) -> Any:
        if not self._conn.poll(120):
            raise TimeoutError("worker process did not answer")
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"worker process: {value}")
        return value

    def step(self, *args: Any) -> Dict[str, Any]:
        self._conn.send(("step",) + args)
        return self._result()

    def close(self) -> None:
        self._conn.send(("close",))
        self._result()
        self._proc.join(30)


class Engine:
    """vLLM's scheduler with `workers` (Worker or RemoteWorker), one step at
    a time. Prefill only: a request computes its prompt in one step and
    then finishes (as a prefill instance's does)."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any,
                 workers: List[Any]):
        self.cfg = vllm_config
        self.bs = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size
        self.sched = create_connector(vllm_config, SCHEDULER,
                                      kv_cache_config)
        self.workers = workers
        self.free_blocks = list(range(1, kv_cache_config.num_blocks))
        self.reqs: Dict[str, Tuple[List[int], List[int]]] = {}
        self.requests: Dict[str, Any] = {}
        self.saving: Dict[str, Set[int]] = {}  # req → ranks not done
        self.finished: Set[str] = set()

    def alloc(self, n: int) -> List[int]:
        got, self.free_blocks = self.free_blocks[:n], self.free_blocks[n:]
        assert len(got) == n, "out of blocks"
        return got

    def admit(self, request: Any) -> int:
        """Schedules a new request: the connector's external tokens."""
        ext, is_async = self.sched.get_num_new_matched_tokens(request, 0)
        assert is_async is False
        assert ext % self.bs == 0 and ext < request.num_tokens
        blocks = self.alloc(-(-request.num_tokens // self.bs))
        self.sched.update_state_after_alloc(request,
                                            vs.KVCacheBlocks(blocks), ext)
        request.num_computed_tokens = ext
        self.reqs[request.request_id] = (request.all_token_ids, blocks)
        self.requests[request.request_id] = request
        return ext

    def step(self, compute: Sequence[str] = ()) -> List[Dict[str, Any]]:
        """One step: the metadata, then every worker's pass; `compute`
        requests prefill their blocks past the loaded ones."""
        meta = self.sched.build_connector_meta(types.SimpleNamespace(
            finished_req_ids=set(self.finished)))
        jobs = []
        for rid in compute:
            req = self.requests[rid]
            first = req.num_computed_tokens // self.bs
            full = req.num_tokens // self.bs
            jobs.append((rid, first, full - first))
        finished, self.finished = self.finished, set()
        results = [w.step(copy.deepcopy(meta), self.reqs, jobs, finished)
                   for w in self.workers]
        for rank, r in enumerate(results):
            for rid in r["sent"]:
                self.saving[rid].discard(rank)
                if not self.saving[rid]:
                    del self.saving[rid]
                    self.free(rid)
        for rid in compute:
            self.requests[rid].num_computed_tokens = \
                self.requests[rid].num_tokens
        return results

    def finish(self, rid: str) -> bool:
        """The request ends: request_finished; True when the connector
        keeps its blocks for a save."""
        delay, params = self.sched.request_finished(self.requests[rid],
                                                    self.reqs[rid][1])
        assert params is None
        self.finished.add(rid)
        if delay:
            self.saving[rid] = set(range(len(self.workers)))
        else:
            self.free(rid)
        return delay

    def free(self, rid: str) -> None:
        self.free_blocks.extend(self.reqs.pop(rid)[1])
        self.requests.pop(rid)

    def drain(self, timeout: float = 30.0) -> None:
        """Steps (a millisecond apart, as an idle engine's) until every
        save is reported by every worker."""
        import time
        deadline = time.monotonic() + timeout
        while self.saving:
            if time.monotonic() > deadline:
                raise TimeoutError(f"saves never reported: "
                                   f"{sorted(self.saving)}")
            self.step()
            time.sleep(0.001)

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.sched.shutdown()


__all__ = ["create_connector", "model", "kv_block", "Worker",
           "RemoteWorker", "Engine", "SCHEDULER", "WORKER"]
