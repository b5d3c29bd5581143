# SPDX-License-Identifier: Apache-2.0
"""kvlink as SGLang's external cache linker (its unified radix cache).

Start SGLang with::

    --enable-unified-cache-external-linker
    --unified-cache-external-linker-config '{"linker": "KvlinkLinker",
        "linker_module_path": "kvlink.sglang",
        "linker_extra_config": {"store": "redis://10.0.0.1:6379"}}'

:class:`KvlinkLinker` implements SGLang's ``UnifiedCacheLinker``: lookups
return this rank's *set* of restorable prefix lengths (SGLang intersects
the sets of its ranks with a MIN all-reduce), loads are queued per request
and started as one batch after an event recorded on the current stream,
SGLang's KV pools wait per layer on :attr:`KvlinkLinker.layer_done_counter`
(a wait enqueued on the current CUDA stream, so the CPU does not block),
offloads run after an event and complete in the order they were queued.
The store is any kvlink URI (``store`` in ``linker_extra_config``; default
the embedded ``mem:`` store). docs/sglang.md has the whole mapping.

Importing this module needs neither SGLang nor torch; ``KvlinkLinker`` is
built, as a subclass of SGLang's ``UnifiedCacheLinker``, when it is first
asked for (``kvlink.sglang.KvlinkLinker``, which SGLang's linker factory
does).
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from . import _sglang_pools as pools
from ._engine import EngineClass, StoreLink, Warnings, check_numbers, \
    config, model_tag, stream_event
from .errors import KvlinkError
from .layout import Layout, MemKind
from .linker import NO_SLOT, GpuCopy, Linker

try:
    import numpy as _np
except ImportError:  # pragma: no cover - the adapter needs numpy
    _np = None  # type: ignore[assignment]

log = logging.getLogger("kvlink.sglang")

_ABC_MODULE = "sglang.srt.mem_cache.unified_cache.unified_cache_linker"
_GROUP_MODULES = ("sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler",
                  "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler")

#: linker_extra_config keys and their defaults.
DEFAULTS: Dict[str, Any] = {
    "store": "mem:",            # a kvlink store URI, or an open Store
    "model_tag": None,          # default: the model path
    "swa_window_pages": None,   # default: from sliding_window_size
    "load_timeout_s": 60.0,     # a layer wait longer than this fails
    "reconnect_s": 10.0,        # retry a store that failed to open
    "max_requests": 0,          # kvlink Linker options (0: its default)
    "io_batch": 0,
    "gpu_copy": "auto",         # a kvlink.GpuCopy name: auto, kernel, dma
    "gpu_staging": 0,           # bytes of its GPU staging ring (0: 64 MiB)
}


class LoadFailed(RuntimeError):
    """A layer-wise load failed: SGLang has published the pages as loaded,
    so the forward pass must not go on over them. ``error`` is kvlink's."""

    def __init__(self, message: str, error: Optional[BaseException] = None):
        super().__init__(message)
        self.error = error


def _name(x: Any) -> str:
    """A PoolName (a str enum), or a str, as its value."""
    return str(getattr(x, "value", x))


def _page_hash(key: str) -> bytes:
    """A page's key from SGLang (64 hex characters) as its 32 bytes."""
    try:
        h = bytes.fromhex(key)
    except (TypeError, ValueError):
        h = b""
    if len(h) != 32:
        raise ValueError(f"kvlink: {key!r} is not a page hash (64 hex "
                         f"characters)")
    return h


def _indices(t: Any) -> Any:
    """A tensor, array or list of indices as a flat int64 numpy array."""
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return _np.asarray(t, dtype=_np.int64).reshape(-1)


def _page_slots(indices: Any, page_size: int, what: str) -> Any:
    """Page slots from SGLang's indices: each page is page_size consecutive
    indices from a multiple of page_size (SGLang's paged allocator)."""
    idx = _indices(indices)
    if idx.size % page_size:
        raise ValueError(f"{what}: {idx.size} indices are not whole "
                         f"{page_size}-token pages")
    pages = idx.reshape(-1, page_size)
    starts = pages[:, 0]
    if (starts % page_size).any() or \
            (pages != starts[:, None] + _np.arange(page_size)).any():
        raise ValueError(f"{what}: pages must be aligned runs of "
                         f"{page_size} indices")
    return starts // page_size


@dataclass
class _Batch:
    batch: int
    rids: List[str]
    ids: List[int]


@dataclass
class _Offload:
    id: int
    event: Any  # kept alive until the offload completes (kvlink reads it)


class LayerDoneCounter:
    """What SGLang's KV pools wait on: ``set_consumer(index)`` names the
    batch the next forward pass reads (-1: none), ``wait_until(layer)``
    (the pipeline-stage-local layer) returns once that layer's pages are
    in their slots for the current CUDA stream; host pools wait on the
    CPU. A batch that failed raises :class:`LoadFailed`: the pages SGLang
    published as loaded are not there."""

    def __init__(self, owner: "_KvlinkLinker"):
        self._owner = owner
        self._consumer = -1
        self._done = -1  # the highest layer waited for in this batch

    def set_consumer(self, index: int) -> None:
        self._consumer = int(index)
        self._done = -1

    def wait_until(self, layer: int) -> None:
        if self._consumer < 0 or layer <= self._done:
            return
        self._owner._wait_layer(self._consumer, int(layer))
        self._done = int(layer)

    def reset(self) -> None:
        self.set_consumer(-1)


class _KvlinkLinker:
    """The implementation; :data:`KvlinkLinker` adds SGLang's base class.

    Threads: SGLang calls the linker from its scheduler thread and waits
    on the counter from its forward thread; a lock keeps the queues
    consistent between them."""

    layer_done_counter: LayerDoneCounter

    def __init__(self, server_args: Any, params: Any, *,
                 components: Any = None,
                 extra_config: Optional[Dict[str, Any]] = None):
        if _np is None:  # pragma: no cover
            raise ImportError("kvlink.sglang needs numpy")
        self._cfg = config(extra_config, DEFAULTS,
                           "kvlink.sglang: linker_extra_config", "sglang")
        check_numbers(self._cfg, ("load_timeout_s", "reconnect_s",
                                  "max_requests", "io_batch",
                                  "gpu_staging"),
                      "kvlink.sglang: linker_extra_config")
        self._cfg["gpu_copy"] = GpuCopy.of(self._cfg["gpu_copy"])
        self.page_size = int(params.page_size)
        kvcache = params.token_to_kv_pool_allocator.get_kvcache()
        specs = pools.pool_specs(kvcache, params,
                                 _group_resolver(kvcache, params,
                                                 components))
        window = 0
        if any(s.source == pools.SWA for s in specs):
            window = pools.sliding_window_pages(params, kvcache,
                                                self.page_size, self._cfg)
        self._specs = {s.name: s for s in specs}
        self.layout: Layout = pools.build_layout(
            specs, model_tag(getattr(server_args, "model_path", None),
                             self._cfg["model_tag"], "sglang"),
            self.page_size,
            pools.shard_of(params), window)
        self._cuda = any(
            info.mem == MemKind.CUDA for info in self._buffer_kinds())
        self._mu = threading.Lock()
        self._ids = 0
        self._queued: Dict[str, int] = {}       # rid → load id
        self._batches: Deque[_Batch] = collections.deque()
        self._offloads: Deque[_Offload] = collections.deque()
        self._done: Dict[int, Any] = {}         # id → Completion
        #: rid → Completion of loads that failed (kvlink's extension:
        #: SGLang's completions carry no status).
        self.failed_loads: Dict[str, Any] = {}
        self.stats: Dict[str, int] = collections.Counter()
        self._warn = Warnings(log)
        self.layer_done_counter = LayerDoneCounter(self)
        self._link = StoreLink(
            self._cfg["store"], self._cfg["reconnect_s"],
            lambda store: Linker(self.layout, store,
                                 max_requests=int(self._cfg["max_requests"]),
                                 io_batch=int(self._cfg["io_batch"]),
                                 gpu_copy=self._cfg["gpu_copy"],
                                 gpu_staging=int(self._cfg["gpu_staging"])),
            self._warn, "SGLang")
        self._connect(starting=True)

    # ------------------------------------------------------------ store

    def _buffer_kinds(self):
        from ._buffers import array_info
        for spec in self._specs.values():
            for layers in spec.components.values():
                for t in layers.values():
                    yield array_info(t)

    @property
    def _lk(self) -> Optional[Linker]:
        return self._link.obj

    def _connect(self, starting: bool = False) -> Optional[Linker]:
        """The linker, opening the store if a retry is due; None while it
        cannot be reached (SGLang then runs without the cache: lookups
        miss, offloads are declined)."""
        lk = self._link.get(starting)
        self.stats["store_down"] = self._link.failures
        return lk

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # ---------------------------------------------------------- lookups

    def _transfers(self, transfers: Sequence[Any]) -> Dict[str, Any]:
        return {_name(t.name): t for t in transfers}

    def lookup(self, rid: str, transfers: List[Any]) -> List[int]:
        """Every tail-relative prefix length (in pages, ascending, 0 left
        out) this rank can restore for the pages of the KV transfer's keys.
        Pools fed by a transfer that is absent do not constrain it. A store
        that fails counts as a miss here (the request is computed), never
        as a hit."""
        by = self._transfers(transfers)
        kv = by.get(pools.KV)
        if kv is None or not kv.keys:
            return []
        lk = self._connect()
        if lk is None:
            return []
        # One bytes object of 32·n: the binding then checks nothing per page.
        pages = b"".join(_page_hash(k) for k in kv.keys)
        rows: Dict[str, Any] = {}
        for name, spec in self._specs.items():
            src = by.get(spec.source)
            if src is None or not src.keys:
                rows[name] = [0] * len(kv.keys)
        self.stats["lookups"] += 1
        try:
            found = lk.lookup_set(pages, pool_pages=rows or None)
        except KvlinkError as e:
            self.stats["lookup_errors"] += 1
            self._warn("lookup", "kvlink: lookup %s failed, computing it "
                       "instead: %s", rid, e)
            return []
        hits = sorted(p for p in found if p > 0)
        self.stats["hit_pages"] += hits[-1] if hits else 0
        return hits

    # ------------------------------------------------------------ loads

    def _slots(self, by: Dict[str, Any], at: Dict[str, int],
               what: str) -> Dict[str, Any]:
        """Per kvlink pool, one slot per page of `at` (key → position;
        NO_SLOT where the pool's source transfer does not carry that
        page)."""
        out: Dict[str, Any] = {}
        for name, spec in self._specs.items():
            src = by.get(spec.source)
            if src is None or not src.keys or src.device_indices is None:
                continue
            idx = src.device_indices
            if spec.translate is not None:
                idx = spec.translate(idx)
            slots = _page_slots(idx, self.page_size, f"{what} {name}")
            if len(slots) != len(src.keys):
                raise ValueError(f"{what} {name}: {len(src.keys)} keys but "
                                 f"{len(slots)} pages of indices")
            row = _np.full(len(at), NO_SLOT, dtype=_np.int64)
            row[[at[k] for k in src.keys]] = slots
            out[name] = row
        return out

    @staticmethod
    def _pages(by: Dict[str, Any]) -> Tuple[List[bytes], Dict[str, int]]:
        """The pages of all transfers, KV's first, each once, and each
        key's position among them."""
        pages: List[bytes] = []
        at: Dict[str, int] = {}
        for name in sorted(by, key=lambda n: n != pools.KV):
            for k in by[name].keys or ():
                if k not in at:
                    at[k] = len(pages)
                    pages.append(_page_hash(k))
        return pages, at

    def load(self, rid: str, transfers: List[Any]) -> bool:
        """Queues the pages of ``transfers`` into their device indices for
        the next :meth:`start_layer_wise_loading`. False when nothing could
        be queued (no store, nothing to load, a refused request)."""
        by = self._transfers(transfers)
        pages, at = self._pages(by)
        lk = self._lk
        if lk is None or not pages:
            return False
        slots = self._slots(by, at, f"load {rid}")
        if not slots:
            return False
        with self._mu:
            if rid in self._queued:
                raise RuntimeError(f"kvlink: load {rid!r} is already queued")
            rid_id = self._next_id()
            try:
                lk.load(rid_id, b"".join(pages), slots)
            except KvlinkError as e:
                self.stats["load_refused"] += 1
                self._warn("load", "kvlink: load %s refused: %s", rid, e)
                return False
            self._queued[rid] = rid_id
        self.stats["loads"] += 1
        return True

    def start_layer_wise_loading(self) -> int:
        """Starts every queued load as one batch, after the work queued so
        far on the current CUDA stream; returns the batch's consumer index
        for the counter, or -1 when nothing was queued."""
        with self._mu:
            if not self._queued:
                return -1
            lk = self._lk
            assert lk is not None  # loads are queued through a linker only
            event = stream_event(self._cuda)
            try:
                batch = lk.start(event=event)
            except KvlinkError as e:
                raise LoadFailed(f"kvlink: cannot start the loads of "
                                 f"{sorted(self._queued)}: {e}", e) from e
            self._batches.append(_Batch(batch, list(self._queued),
                                        list(self._queued.values())))
            self._queued.clear()
        return batch

    def _wait_layer(self, batch: int, layer: int) -> None:
        lk = self._lk
        if lk is None:  # reset or closed under a forward pass
            raise LoadFailed(f"kvlink: batch {batch} waited for after close")
        timeout = float(self._cfg["load_timeout_s"])
        try:
            if self._cuda:
                lk.wait_stream(batch, layer, timeout=timeout)
            else:
                lk.wait(batch, layer, timeout=timeout)
        except KvlinkError as e:
            self.stats["load_failures"] += 1
            raise LoadFailed(f"kvlink: layer {layer} of load batch {batch} "
                             f"failed: {e}", e) from e

    def cancel_queued_load(self, rid: str) -> bool:
        """False: as SGLang's own linkers now do, a load it queued is never
        withdrawn (its radix tree has published the pages, and only the
        load fills them); it completes and is drained as usual."""
        return False

    # ------------------------------------------------------ completions

    def _poll(self) -> None:
        lk = self._lk
        while lk is not None:
            got = lk.poll(256)
            for c in got:
                self._done[c.id] = c
            if len(got) < 256:
                return

    def _leading(self, queue: Any, ids: Any) -> int:
        """How many entries at the head of `queue` are finished: every id
        ids(entry) gives has its completion."""
        n = 0
        for entry in queue:
            if not all(i in self._done for i in ids(entry)):
                break
            n += 1
        return n

    def _loads_done(self) -> int:
        return self._leading(self._batches, lambda b: b.ids)

    def num_completed_loads(self) -> int:
        with self._mu:
            self._poll()
            return self._loads_done()

    def pop_completed_load(self) -> List[str]:
        """The rids of the oldest finished batch; those whose load failed
        are also in :attr:`failed_loads` (and the forward pass that read
        them raised :class:`LoadFailed`)."""
        with self._mu:
            self._poll()
            if not self._loads_done():
                return []
            b = self._batches.popleft()
            for rid, i in zip(b.rids, b.ids):
                c = self._done.pop(i)
                if not c.ok:
                    self.failed_loads[rid] = c
                    self.stats["failed_loads"] += 1
            return b.rids

    # ---------------------------------------------------------- offloads

    def offload(self, transfers: List[Any]) -> bool:
        """Queues one node's pages for storing, after the work queued so
        far on the current CUDA stream. True: exactly one result follows,
        in order, from :meth:`pop_completed_offload`."""
        by = self._transfers(transfers)
        kv = by.get(pools.KV)
        if kv is None or not kv.keys:
            return False
        lk = self._connect()
        if lk is None:
            return False
        pages, at = self._pages(by)
        slots = self._slots(by, at, "offload")
        if not slots:
            return False
        with self._mu:
            oid = self._next_id()
            event = stream_event(self._cuda)
            try:
                lk.offload(oid, b"".join(pages), slots, event=event)
            except KvlinkError as e:
                self.stats["offload_refused"] += 1
                self._warn("offload", "kvlink: offload refused: %s", e)
                return False
            self._offloads.append(_Offload(oid, event))
        self.stats["offloads"] += 1
        return True

    def _offloads_done(self) -> int:
        return self._leading(self._offloads, lambda o: (o.id,))

    def num_completed_offloads(self) -> int:
        with self._mu:
            self._poll()
            return self._offloads_done()

    def pop_completed_offload(self) -> bool:
        """The oldest finished offload's result: True when every page of
        it is stored."""
        with self._mu:
            self._poll()
            if not self._offloads_done():
                raise IndexError("kvlink: no finished offload to pop")
            c = self._done.pop(self._offloads.popleft().id)
            if not c.ok:
                self.stats["failed_offloads"] += 1
            return c.ok

    # ------------------------------------------------------ reset/close

    def reset(self) -> None:
        """Quiesces: withdraws loads not started, waits for started batches
        and queued offloads, and forgets every result."""
        with self._mu:
            lk = self._lk
            if lk is not None:
                for i in self._queued.values():
                    lk.cancel(i)
                timeout = float(self._cfg["load_timeout_s"])
                for b in self._batches:
                    try:
                        lk.wait(b.batch, max(lk.layers - 1, 0),
                                timeout=timeout)
                    except KvlinkError:
                        pass  # failed batches are finished too
                try:
                    lk.flush(timeout=timeout)
                except KvlinkError as e:
                    self._warn("reset", "kvlink: reset: %s", e)
                want = len(self._queued) + len(self._offloads) + \
                    sum(len(b.ids) for b in self._batches)
                seen = len(self._done)
                deadline = time.monotonic() + timeout
                while seen < want and time.monotonic() < deadline:
                    seen += len(lk.poll(256, timeout=0.05))
            self._queued.clear()
            self._batches.clear()
            self._offloads.clear()
            self._done.clear()
            self.layer_done_counter.reset()

    def close(self) -> None:
        """reset, then closes the linker and the store."""
        self.reset()
        with self._mu:
            self._link.close()


def _group_resolver(kvcache: Any, params: Any, components: Any):
    """A function building SGLang's DevicePoolGroup for pools only its own
    assembler knows, or None when SGLang is not importable."""
    for name in _GROUP_MODULES:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = __import__(name, fromlist=["_"])
            except ImportError:
                continue
        fn = getattr(module, "resolve_hybrid_device_pool_group", None)
        if fn is not None:
            return lambda: fn(kvcache=kvcache, page_size=int(params.page_size),
                              params=params,
                              components=set(components or ()))
    return None


_class = EngineClass(__name__, "KvlinkLinker", _KvlinkLinker,
                     _ABC_MODULE + ".UnifiedCacheLinker", "SGLang")


def __getattr__(name: str) -> Any:
    """``KvlinkLinker``: the linker class, built on first use as a subclass
    of SGLang's UnifiedCacheLinker (so importing this module needs no
    SGLang)."""
    return _class.get(name)


# KvlinkLinker is left out: ``import *`` must work without SGLang.
__all__ = ["LayerDoneCounter", "LoadFailed", "DEFAULTS"]
