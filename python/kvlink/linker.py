# SPDX-License-Identifier: Apache-2.0
"""The linker: lookups, layer-wise loads, background offloads, completions.

A :class:`Linker` runs over a finalized :class:`~kvlink.Layout` and a
:class:`~kvlink.Store` (it keeps both alive) with a loader and an offloader
thread. The engine's loop, per forward pass::

    hit = lk.lookup(pages)                  # longest restorable prefix
    lk.load(req_id, pages[:hit], slots)     # queue loads …
    batch = lk.start()                      # … and start them as one batch
    for layer in range(lk.layers):
        lk.wait(batch, layer)               # or lk.wait_stream(batch, layer)
        run_layer(layer)
    for c in lk.poll():                     # every request, exactly once
        ...

Slots: for a layout with one pool, ``slots`` is a sequence of slot indices,
one per page. With several pools, pass a dict ``{pool name or id: slots}`` or
a list with one entry per pool (None: nothing of that pool). A slot of None
or -1 means "this page is not loaded/offloaded in that pool".

Tenants: pages are named by their hashes only. Engines that must not share
pages hash them in different namespaces,
``hash_pages(tokens, page_size, prior=namespace_seed("tenant-a"))``; the
linker needs nothing else to keep them apart.

Blocking calls (wait, flush, poll with a timeout) release the GIL. Timeouts
are in seconds: None waits without limit, 0 does not block.
"""

from __future__ import annotations

import ctypes
import enum
import json
import math
import operator
import threading
from typing import (Any, Callable, Dict, FrozenSet, List, Mapping, NamedTuple,
                    Optional, Sequence, Union)

from . import _lib
from ._args import CallGuard, c_int, guarded
from ._buffers import event_handle, stream_handle
from ._lib import kvl_completion, kvl_linker_opts, lib
from ._shared import Closable, SharedHandle, opening_over, released
from .errors import InvalidArgument, KvlinkError, StateError, check, \
    make_error
from .hashes import HashesLike, hash_array
from .layout import Layout
from .store import Store, redact_uri, render

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None  # type: ignore[assignment]

NO_SLOT = -1
"""A slot value: this page has no slot in that pool."""

Slots = Any
"""Slot indices: a sequence (or numpy array) with one slot per page for a
one-pool layout; else ``{pool: slots}`` or a per-pool list (None entries for
pools not involved)."""


class RequestKind(enum.IntEnum):
    LOAD = _lib.KVL_REQ_LOAD
    OFFLOAD = _lib.KVL_REQ_OFFLOAD


class Completion(NamedTuple):
    """The outcome of one load or offload request."""
    id: int
    kind: RequestKind
    status: int        #: 0, or the first error code (e.g. KVL_ECANCELED)
    valid_pages: int   #: leading pages fully loaded / stored
    n_pages: int       #: pages in the request

    @property
    def ok(self) -> bool:
        """True when every page of the request succeeded."""
        return self.status == 0

    @property
    def status_name(self) -> str:
        """``"KVL_OK"`` or the error's name, e.g. ``"KVL_ECANCELED"``."""
        return _lib.err_name(self.status)

    @property
    def error(self) -> Optional[KvlinkError]:
        """The status as an exception (None when ok)."""
        if self.status == 0:
            return None
        return make_error(self.status, None,
                          f"{self.kind.name.lower()} {self.id}")


def _is_int(x: Any) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or (_np is not None and
                                  isinstance(x, _np.integer))


def _timeout_ms(timeout: Optional[float]) -> int:
    if timeout is None:
        return _lib.UINT32_MAX
    if timeout < 0:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              f"timeout must be >= 0 seconds or None, got "
                              f"{timeout}")
    return min(int(math.ceil(timeout * 1000)), _lib.UINT32_MAX - 1)


class RankGroup(SharedHandle):
    """In-process all-reduce for ranks that are threads of one process: pass
    the same group as ``allreduce`` to every rank's linker.

    Args:
        n_ranks: threads that take part in every round.
        timeout: seconds a rank waits for the others before the group breaks.
    """

    _what = "rank group"

    def __init__(self, n_ranks: int, timeout: float = 10.0):
        super().__init__(_lib.RankGroupP())
        check(lib.kvl_rank_group_create(c_int(n_ranks, "unsigned",
                                              "RankGroup: n_ranks", lo=1),
                                        _timeout_ms(timeout),
                                        ctypes.byref(self._h)),
              context="rank group")
        self.n_ranks = n_ranks

    def _free(self) -> None:
        lib.kvl_rank_group_free(self._h)
        self._h = _lib.RankGroupP()


AllReduce = Union[RankGroup, Callable[[Any], None]]
"""How ranks agree on lookups: a RankGroup, or a callable that receives the
bitmap (a numpy uint64 array, or a memoryview of 'Q' without numpy) and
replaces it in place by the bitwise AND over all ranks (e.g. with
``torch.distributed.all_reduce(t, op=ReduceOp.BAND)`` on an int64 view)."""


class GpuCopy(enum.IntEnum):
    """How loads into GPU pools move the bytes of objects the store lends
    (kvl_gpu_copy)."""
    AUTO = _lib.KVL_GPU_COPY_AUTO      #: copy engines where runs pay
    KERNEL = _lib.KVL_GPU_COPY_KERNEL  #: the gather kernel only
    DMA = _lib.KVL_GPU_COPY_DMA        #: copy engines for every run

    @classmethod
    def of(cls, value: Union["GpuCopy", int, str]) -> int:
        """``value``, or the member of that name (any case), as an int;
        ValueError for anything else."""
        names = ", ".join(m.name.lower() for m in cls)
        try:
            if isinstance(value, str):
                return int(cls[value.upper()])
            if not isinstance(value, bool):
                return int(cls(operator.index(value)))
        except (KeyError, ValueError, TypeError):
            pass
        raise ValueError(f"gpu_copy: {value!r} is not one of {names}")


class Linker(Closable):
    """The engine-facing object over a finalized layout and a store.

    Args:
        layout: a finalized Layout (kept alive by the linker).
        store: the Store (kept alive by the linker).
        max_requests: requests accepted and not yet polled (default 4096).
        max_request_pages: pages of one request (default 2^20).
        io_batch: items one store call carries (default 4096).
        gpu_copy: how loads into GPU pools move bytes the store lends
            (a GpuCopy, or its name: "auto", "kernel", "dma").
        gpu_staging: bytes of the copy engines' GPU staging ring
            (default 64 MiB, at most 1 GiB).
        allreduce: across ranks for lookups (None: this is the only rank).

    Raises:
        InvalidArgument: unfinalized layout, bad option.
        NotSupported: a pool on a CUDA device in a build without CUDA.

    All methods are thread-safe. Usable as a context manager (closes on
    exit).
    """

    def __init__(self, layout: Layout, store: Store, *,
                 max_requests: int = 0, max_request_pages: int = 0,
                 io_batch: int = 0,
                 gpu_copy: Union["GpuCopy", int, str] = 0,
                 gpu_staging: int = 0,
                 allreduce: Optional[AllReduce] = None):
        self._h = _lib.LinkerP()
        self._guard = CallGuard("linker")
        for what, obj, cls in (("layout", layout, Layout),
                               ("store", store, Store)):
            if not isinstance(obj, cls):
                raise TypeError(f"Linker(layout, store): {what} must be a "
                                f"kvlink.{cls.__name__}, got "
                                f"{type(obj).__name__}")
        self._layout = layout
        self._store = store
        self._allreduce_obj = allreduce
        self._cb = None
        # The callback runs on the thread that called lookup: its error is
        # kept per thread.
        self._cb_local = threading.local()
        opts = kvl_linker_opts()
        opts.struct_size = ctypes.sizeof(kvl_linker_opts)
        opts.max_requests = c_int(max_requests, "uint32_t",
                                  "Linker: max_requests")
        opts.max_request_pages = c_int(max_request_pages, "uint32_t",
                                       "Linker: max_request_pages")
        opts.io_batch = c_int(io_batch, "uint32_t", "Linker: io_batch")
        opts.gpu_copy = c_int(GpuCopy.of(gpu_copy), "uint32_t",
                              "Linker: gpu_copy")
        opts.gpu_staging = c_int(gpu_staging, "uint32_t",
                                 "Linker: gpu_staging")
        if isinstance(allreduce, RankGroup):
            opts.allreduce = ctypes.cast(lib.kvl_rank_group_allreduce,
                                         _lib.kvl_allreduce_fn)
            opts.allreduce_user = ctypes.cast(allreduce._h, ctypes.c_void_p)
        elif allreduce is not None:
            if not callable(allreduce):
                raise TypeError("allreduce: expected a RankGroup or a "
                                "callable")
            self._cb = _lib.kvl_allreduce_fn(self._trampoline)
            opts.allreduce = self._cb
        err = ctypes.create_string_buffer(512)
        used = [layout, store] + ([allreduce] if isinstance(
            allreduce, RankGroup) else [])
        self._used = used
        with opening_over(self, used):
            rc = lib.kvl_linker_open(store._handle, layout._handle,
                                     ctypes.byref(opts),
                                     ctypes.byref(self._h), err, len(err))
            check(rc, lambda: err.value.decode(errors="replace"),
                  "open linker")
            self._n_pools = layout.pool_count

    # ---------------------------------------------------------- internals

    @property
    def _handle(self):
        if not self._h:
            raise StateError(_lib.KVL_ESTATE, "the linker is closed")
        return self._h

    def _errmsg(self) -> str:
        return lib.kvl_linker_errmsg(self._h).decode(errors="replace")

    def _check(self, rc: int, context: Optional[str] = None) -> int:
        return check(rc, self._errmsg, context)

    def _trampoline(self, bits, n_words, user):
        try:
            if _np is not None:
                arr = _np.ctypeslib.as_array(bits, shape=(n_words,))
            else:  # pragma: no cover
                arr = memoryview(ctypes.cast(
                    bits, ctypes.POINTER(ctypes.c_uint64 * n_words)
                ).contents).cast("B").cast("Q")
            self._allreduce_obj(arr)
            return 0
        except KvlinkError as e:
            self._cb_local.error = e
            return e.code
        except BaseException as e:  # noqa: BLE001 - passed on after lookup
            self._cb_local.error = e
            return _lib.KVL_EIO

    def _slot_row(self, row: Any, n_pages: int, pool: int):
        if row is None:
            return None
        if _np is not None and isinstance(row, _np.ndarray):
            a = _np.asarray(row)
            if a.dtype.kind not in "iu":
                raise InvalidArgument(_lib.KVL_EINVAL,
                                      f"slots of pool {pool}: expected "
                                      f"integers, got {a.dtype}")
            if a.shape != (n_pages,):
                raise InvalidArgument(_lib.KVL_EINVAL,
                                      f"slots of pool {pool}: shape "
                                      f"{a.shape}, expected ({n_pages},)")
            a = a.astype(_np.int64)
            if a.size and a.min() < NO_SLOT:
                raise InvalidArgument(_lib.KVL_EINVAL,
                                      f"slots of pool {pool}: negative slot "
                                      f"{int(a.min())} (-1 means no slot)")
            a = a.astype(_np.uint64)  # -1 → SIZE_MAX, KVL_NO_SLOT
            return (ctypes.c_size_t * n_pages).from_buffer_copy(a.tobytes())
        if hasattr(row, "tolist"):  # torch tensors, array.array
            row = row.tolist()
        row = list(row)
        if len(row) != n_pages:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"slots of pool {pool}: {len(row)} slots "
                                  f"for {n_pages} pages")
        vals = []
        for i, s in enumerate(row):
            if s is None or s == NO_SLOT:
                vals.append(_lib.KVL_NO_SLOT)
            elif not _is_int(s) or s < 0:
                raise InvalidArgument(_lib.KVL_EINVAL,
                                      f"slots of pool {pool}: page {i}: bad "
                                      f"slot {s!r}")
            else:
                vals.append(c_int(s, "size_t",
                                  f"slots of pool {pool}: page {i}"))
        return (ctypes.c_size_t * n_pages)(*vals)

    def _pool_rows(self, value: Any, what: str) -> List[Any]:
        """One entry per pool from a {pool name or id: entry} mapping
        (None for the pools it leaves out) or a per-pool sequence."""
        if isinstance(value, Mapping):
            rows: List[Any] = [None] * self._n_pools
            for pool, row in value.items():
                pid = self._layout.pool_ref(pool)
                if not 0 <= pid < self._n_pools:
                    raise InvalidArgument(_lib.KVL_EINVAL,
                                          f"{what}: no pool {pool!r}")
                rows[pid] = row
            return rows
        rows = list(value)
        if len(rows) != self._n_pools:
            raise InvalidArgument(
                _lib.KVL_EINVAL,
                f"{what}: {len(rows)} per-pool entries for "
                f"{self._n_pools} pools")
        return rows

    def _slots(self, slots: Slots, n_pages: int):
        rows: List[Any] = [None] * self._n_pools
        if isinstance(slots, Mapping):
            rows = self._pool_rows(slots, "slots")
        else:
            if hasattr(slots, "tolist") and not (
                    _np is not None and isinstance(slots, _np.ndarray) and
                    slots.ndim == 1):
                slots = slots.tolist()  # torch tensors, 2-D arrays
            per_pool = not (_np is not None and
                            isinstance(slots, _np.ndarray)) and any(
                x is not None and not _is_int(x) for x in slots)
            if per_pool:
                rows = self._pool_rows(slots, "slots")
            elif self._n_pools != 1:
                raise InvalidArgument(
                    _lib.KVL_EINVAL,
                    f"slots: the layout has {self._n_pools} pools: pass "
                    f"{{pool: slots}} or one entry per pool")
            else:
                rows[0] = slots
        arrays = [self._slot_row(r, n_pages, i) for i, r in enumerate(rows)]
        ptrs = (ctypes.POINTER(ctypes.c_size_t) * self._n_pools)(
            *[ctypes.cast(a, ctypes.POINTER(ctypes.c_size_t))
              if a is not None else None for a in arrays])
        return ptrs, arrays

    def _pages(self, pages: HashesLike):
        arr, n = hash_array(pages)
        return arr, n

    # ------------------------------------------------------------ lookup

    @property
    @guarded
    def layers(self) -> int:
        """Model layers a batch has: 1 + the highest layer of any pool."""
        return int(lib.kvl_linker_layers(self._handle))

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def store(self) -> Store:
        return self._store

    @guarded
    def lookup(self, pages: HashesLike, *,
               pool_pages: Optional[Any] = None) -> int:
        """The longest prefix of ``pages`` (in pages) restorable on every
        rank. Side-effect free.

        Args:
            pages: page hashes in prefix order (a tenant's: hashed with its
                :func:`~kvlink.namespace_seed` as ``prior``).
            pool_pages: optional, per pool (dict or list) a sequence of flags,
                one per page: check only the flagged pages of that pool.

        Raises:
            StoreIOError: the store is down. OutOfRange: too many pages.
        """
        arr, n = self._pages(pages)
        pp, keep = self._pool_pages(pool_pages, n)
        out = ctypes.c_size_t(0)
        self._cb_local.error = None
        rc = lib.kvl_linker_lookup(self._handle, arr, n, pp,
                                   ctypes.byref(out))
        e = self._cb_local.error
        if e is not None:
            self._cb_local.error = None
            if rc < 0 and not isinstance(e, KvlinkError):
                raise make_error(rc, f"allreduce callback failed: {e!r}",
                                 "lookup") from e
            if rc < 0:
                raise e
        self._check(rc, "lookup")
        del keep
        return out.value

    @guarded
    def lookup_set(self, pages: HashesLike, *,
                   pool_pages: Optional[Any] = None) -> FrozenSet[int]:
        """This rank's restorable set: every prefix length p (in pages, 0
        included) at which each pool of this rank can be restored. The
        ``allreduce`` callback is not called: engines that intersect the
        sets of their ranks themselves use this instead of :meth:`lookup`.

        Arguments and errors are :meth:`lookup`'s; a store that fails
        raises (StoreIOError), it never reads as a miss.
        """
        arr, n = self._pages(pages)
        pp, keep = self._pool_pages(pool_pages, n)
        words = n // 64 + 1
        bits = (ctypes.c_uint64 * words)()
        self._check(lib.kvl_linker_lookup_set(self._handle, arr, n, pp, bits,
                                              words), "lookup_set")
        del keep
        return frozenset(w * 64 + b for w in range(words)
                         for b in range(64) if bits[w] >> b & 1)

    def _pool_pages(self, pool_pages: Optional[Any], n: int):
        """(C array of per-pool flag rows or None, what keeps them alive)."""
        if pool_pages is None:
            return None, []
        rows = self._pool_rows(pool_pages, "pool_pages")
        pp = (ctypes.POINTER(ctypes.c_uint8) * self._n_pools)()
        keep = []
        for i, r in enumerate(rows):
            if r is None:
                continue
            flags = [1 if f else 0 for f in r]
            if len(flags) != n:
                raise InvalidArgument(
                    _lib.KVL_EINVAL,
                    f"pool_pages of pool {i}: {len(flags)} flags for "
                    f"{n} pages")
            a = (ctypes.c_uint8 * max(n, 1))(*flags)
            keep.append(a)
            pp[i] = ctypes.cast(a, ctypes.POINTER(ctypes.c_uint8))
        return pp, keep

    # ------------------------------------------------------------- loads

    @guarded
    def load(self, id: int, pages: HashesLike, slots: Slots) -> None:
        """Queues a load of ``pages`` into ``slots`` for request ``id``; it
        runs in the next :meth:`start`'s batch and completes once (poll).
        The slots are written until the request completes.

        Raises:
            AlreadyExists: a load with this id is queued or running.
            OutOfRange: a slot beyond its pool. Full: max_requests reached.
            Closed: the linker is shutting down.
        """
        arr, n = self._pages(pages)
        ptrs, keep = self._slots(slots, n)
        id = c_int(id, "uint64_t", "load: id")
        self._check(lib.kvl_linker_load(self._handle, id, arr, n, ptrs),
                    f"load {id}")
        del keep

    @guarded
    def cancel(self, id: int) -> bool:
        """Withdraws the queued load ``id`` if its batch has not started
        (it then completes as KVL_ECANCELED). True if withdrawn, False if
        already running (it completes normally).

        Raises:
            NotFound: no load with this id is queued or running.
        """
        out = ctypes.c_int(0)
        id = c_int(id, "uint64_t", "cancel: id")
        self._check(lib.kvl_linker_cancel(self._handle, id,
                                          ctypes.byref(out)),
                    f"cancel {id}")
        return bool(out.value)

    @guarded
    def start(self, *, event: Any = None) -> int:
        """Takes every queued load as one batch and returns its id (an
        empty batch is valid: all its layers are complete).

        Args:
            event: optional CUDA event recorded after the engine's kernels
                that still read the destination slots (a
                ``torch.cuda.Event``, CuPy event or int handle): no byte of
                the batch is written before it completes. It counts as
                recorded now; the engine may record it again at once.

        Raises:
            Full: 64 batches not yet finished. Closed.
            NotSupported: an event, but no pool lives on a CUDA device.
        """
        out = ctypes.c_uint64(0)
        self._check(lib.kvl_linker_start_after(self._handle,
                                               event_handle(event),
                                               ctypes.byref(out)),
                    "start")
        return out.value

    @guarded
    def wait(self, batch: int, layer: int,
             timeout: Optional[float] = None) -> None:
        """Blocks until layer ``layer`` of ``batch`` is complete (and every
        earlier one), or ``timeout`` seconds pass; also when the batch
        failed, the layer has then landed for every page that loads, so the
        batch's other requests may be read. The GIL is released.

        Raises:
            Timeout; StoreIOError, Corrupt, NotFound (a page evicted since
            lookup) or Canceled: the batch failed at this layer or before
            (the completions say which requests, and how many pages are
            valid); OutOfRange: layer beyond :attr:`layers`; NotFound:
            unknown or too old batch.
        """
        batch = c_int(batch, "uint64_t", "wait: batch")
        layer = c_int(layer, "uint32_t", "wait: layer")
        self._check(lib.kvl_linker_wait(self._handle, batch, layer,
                                        _timeout_ms(timeout)),
                    f"wait batch {batch} layer {layer}")

    @guarded
    def wait_stream(self, batch: int, layer: int, stream: Any = None,
                    timeout: Optional[float] = None) -> None:
        """Makes a CUDA stream wait on the GPU until layer ``layer`` of
        ``batch`` is in its slots; the CPU does not wait for the copies.

        Args:
            stream: a ``torch.cuda.Stream``, a CuPy stream, an int
                ``cudaStream_t``, or None: torch's current stream when torch
                has initialized CUDA, else the legacy default stream.

        A linker without GPU pools (or a kvlink built without CUDA) has
        nothing to copy on a stream: this then waits on the CPU exactly as
        :meth:`wait`.

        Raises:
            as :meth:`wait`, and StoreIOError when a CUDA call failed.
        """
        batch = c_int(batch, "uint64_t", "wait_stream: batch")
        layer = c_int(layer, "uint32_t", "wait_stream: layer")
        self._check(lib.kvl_linker_wait_stream(self._handle, batch, layer,
                                               stream_handle(stream),
                                               _timeout_ms(timeout)),
                    f"wait_stream batch {batch} layer {layer}")

    # ---------------------------------------------------------- offloads

    @guarded
    def offload(self, id: int, pages: HashesLike, slots: Slots, *,
                event: Any = None) -> None:
        """Queues a background offload of ``pages`` from ``slots`` (every
        layer) for request ``id``. Pages already stored are skipped. The
        slots must not change until the request completes.

        Args:
            event: optional CUDA event recorded after the kernels that wrote
                those pages (a ``torch.cuda.Event``, CuPy event or int
                ``cudaEvent_t``): the copies out of GPU slots start only
                after it has completed. It must stay valid until the request
                completes. None: the pages are written already.

        Raises:
            AlreadyExists, Full, OutOfRange, InvalidArgument, Closed;
            NotSupported: an event, but no pool lives on a CUDA device.
        """
        arr, n = self._pages(pages)
        ptrs, keep = self._slots(slots, n)
        id = c_int(id, "uint64_t", "offload: id")
        self._check(lib.kvl_linker_offload(self._handle, id, arr, n,
                                           ptrs, event_handle(event)),
                    f"offload {id}")
        del keep

    @guarded
    def flush(self, timeout: Optional[float] = None) -> None:
        """Blocks until every offload queued before the call completed.

        Raises:
            Timeout.
        """
        self._check(lib.kvl_linker_flush(self._handle, _timeout_ms(timeout)),
                    "flush")

    # ------------------------------------------------------- completions

    @guarded
    def poll(self, max_completions: int = 64,
             timeout: Optional[float] = 0) -> List[Completion]:
        """Up to ``max_completions`` completions, oldest first; with a
        timeout, waits that long for at least one. Each request is reported
        exactly once."""
        # At most max_requests (<= KVL_LINKER_MAX_REQUESTS) can be there.
        cap = min(c_int(max_completions, "size_t", "poll: max_completions",
                        lo=1), _lib.KVL_LINKER_MAX_REQUESTS)
        out = (kvl_completion * cap)()
        n = ctypes.c_size_t(0)
        ms = 0 if timeout == 0 else _timeout_ms(timeout)
        self._check(lib.kvl_linker_poll(self._handle, out, cap,
                                        ctypes.byref(n), ms), "poll")
        return [Completion(c.id, RequestKind(c.kind), c.status,
                           c.valid_pages, c.n_pages) for c in out[:n.value]]

    def poll_until(self, ids: Sequence[int], timeout: float = 10.0
                   ) -> Dict[int, Completion]:
        """Polls until every request of ``ids`` completed; returns them by
        id. Completions of other requests met on the way are returned too.

        Raises:
            Timeout: some ids did not complete in time (the message lists
            them).
        """
        import time
        want = set(c_int(i, "uint64_t", "poll_until: id") for i in ids)
        got: Dict[int, Completion] = {}
        deadline = time.monotonic() + timeout
        while not want.issubset(got):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(want - set(got))
                raise make_error(_lib.KVL_ETIMEDOUT,
                                 f"requests {missing} did not complete "
                                 f"within {timeout} s", "poll_until")
            for c in self.poll(64, min(left, 0.05)):
                got[c.id] = c
        return got

    # ------------------------------------------------------------- stats

    @guarded
    def render_stats(self, format: Union[str, int] = "json") -> str:
        """The linker's counters, latency histograms and store stats as
        text: ``"json"`` (one object) or ``"prometheus"``."""
        return render(lib.kvl_linker_stats_render, self._handle, format,
                      self._errmsg)

    def stats_json(self) -> Dict[str, Any]:
        """:meth:`render_stats` in JSON, parsed."""
        return json.loads(self.render_stats("json"))

    # ---------------------------------------------------------- lifetime

    @property
    def closed(self) -> bool:
        return not self._h

    def shutdown(self) -> None:
        """Stops the linker: new loads/offloads fail with Closed; queued and
        running work completes as canceled (a running offload finishes);
        waiters wake up. Completions stay pollable. Idempotent."""
        guard = getattr(self, "_guard", None)
        if guard is None or not self._h:
            return
        try:
            guard.enter()
        except StateError:  # closing or closed: stopped already
            return
        try:
            lib.kvl_linker_shutdown(self._h)
        finally:
            guard.leave()

    def close(self) -> None:
        """Shuts down and frees the linker (unpolled completions are
        dropped). Calls other threads have in flight return first: the
        shutdown wakes the ones that wait (they raise Canceled or return),
        and the linker is freed once none is left; calls that start
        meanwhile raise StateError. Raises StateError when called from
        inside a call on this linker (an allreduce callback). Closing twice
        is harmless."""
        guard = getattr(self, "_guard", None)
        if guard is None:  # __init__ failed before there was a handle
            return

        def check():
            if guard._threads.get(threading.get_ident()):
                return  # guard.close refuses it
            if self._h:  # wake the waiters before waiting for them
                lib.kvl_linker_shutdown(self._h)

        def free():
            if self._h:
                lib.kvl_linker_close(self._h)
                self._h = _lib.LinkerP()
                released(self._used)

        guard.close(free, check)

    def __repr__(self) -> str:
        return (f"<kvlink.Linker layout={self._layout.model_tag!r} "
                f"store={redact_uri(self._store.uri)!r}"
                f"{' closed' if self.closed else ''}>")


__all__ = ["Linker", "Completion", "RequestKind", "RankGroup", "NO_SLOT",
           "AllReduce", "Slots"]
