# SPDX-License-Identifier: Apache-2.0
"""Lookups without memory: which prefixes every rank of a model can restore,
asked of the store alone.

A :class:`Prober` is for a process that has none of the ranks' buffers: an
engine's scheduler when its workers are other processes, a router, a
prefill/decode proxy. It takes one finalized :class:`~kvlink.Layout` per
pipeline stage, described by sizes only (:meth:`Layout.add_shape`) or with
memory (only sizes are read), derives the keys of every tensor- and
context-parallel rank, and answers with one batched existence query::

    lay = kvl.Layout("llama3-8b/bf16", 16, shard=kvl.Shard(tp_size=4))
    kv = lay.add_pool("kv")
    for layer in range(32):
        lay.add_shape(kv, "k", layer, 16 * 8 * 128 * 2)
        lay.add_shape(kv, "v", layer, 16 * 8 * 128 * 2)
    with kvl.Prober(store, [lay.finalize()]) as pr:
        hit = pr.lookup(pages)          # restorable on all 4 tp ranks
"""

from __future__ import annotations

import ctypes
from typing import FrozenSet, Sequence

from . import _lib
from ._args import CallGuard, guarded
from ._lib import lib
from ._shared import Closable, opening_over, released
from .errors import StateError, check
from .hashes import HashesLike, hash_array
from .layout import Layout
from .store import Store


class Prober(Closable):
    """Every rank's restorable prefixes of a model's pages, from the store.

    Args:
        store: the Store the ranks' linkers use (kept alive).
        stages: finalized layouts, one per pipeline stage (kept alive).

    Raises:
        InvalidArgument: no layouts, an unfinalized one, layouts of other
            page or rank sizes, not one layout per pipeline stage.

    Thread-safe; lookups on one prober run one at a time.
    """

    def __init__(self, store: Store, stages: Sequence[Layout]):
        if not isinstance(store, Store):
            raise TypeError(f"Prober: store must be a kvlink.Store, got "
                            f"{type(store).__name__}")
        stages = list(stages)
        for i, lay in enumerate(stages):
            if not isinstance(lay, Layout):
                raise TypeError(f"Prober: stages[{i}] must be a "
                                f"kvlink.Layout, got {type(lay).__name__}")
        self._h = _lib.ProberP()
        self._guard = CallGuard("prober")
        self._store, self._stages = store, stages
        with opening_over(self, [store, *stages]):
            arr = (_lib.LayoutP * max(len(stages), 1))(
                *[lay._handle for lay in stages])
            err = ctypes.create_string_buffer(512)
            rc = lib.kvl_prober_open(store._handle, arr if stages else None,
                                     len(stages), ctypes.byref(self._h), err,
                                     len(err))
            check(rc, lambda: err.value.decode(errors="replace"), "Prober")

    @property
    def _handle(self):
        if not self._h:
            raise StateError(_lib.KVL_ESTATE, "the prober is closed")
        return self._h

    def _check(self, rc: int, context: str) -> int:
        return check(rc, lambda: lib.kvl_prober_errmsg(self._h).decode(
            errors="replace"), context)

    @guarded
    def lookup_set(self, pages: HashesLike) -> FrozenSet[int]:
        """The prefix lengths of ``pages`` (0 included) restorable on every
        rank. A store that fails raises (StoreIOError), never a miss."""
        arr, n = hash_array(pages)
        words = n // 64 + 1
        bits = (ctypes.c_uint64 * words)()
        self._check(lib.kvl_prober_lookup_set(self._handle, arr, n, bits,
                                              words), "prober lookup_set")
        return frozenset(w * 64 + b for w in range(words)
                         for b in range(64) if bits[w] >> b & 1)

    @guarded
    def lookup(self, pages: HashesLike) -> int:
        """The longest prefix of ``pages`` restorable on every rank."""
        arr, n = hash_array(pages)
        out = ctypes.c_size_t(0)
        self._check(lib.kvl_prober_lookup(self._handle, arr, n,
                                          ctypes.byref(out)),
                    "prober lookup")
        return out.value

    @property
    def closed(self) -> bool:
        return not self._h

    def close(self) -> None:
        """Frees the prober (waits for lookups in flight). Idempotent."""
        guard = getattr(self, "_guard", None)
        if guard is None:  # __init__ failed before there was a handle
            return

        def free():
            if self._h:
                lib.kvl_prober_close(self._h)
                self._h = _lib.ProberP()
                released([self._store, *self._stages])

        guard.close(free)

    def __repr__(self) -> str:
        return f"<kvlink.Prober {len(self._stages)} stage(s)" + \
            (" closed>" if self.closed else ">")


__all__ = ["Prober"]
