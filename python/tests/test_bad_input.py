# SPDX-License-Identifier: Apache-2.0
"""What the binding refuses before the C API sees it, and closing handles
while other threads are inside calls on them.

- Read-only memory (bytes, read-only numpy arrays and memoryviews) is never
  described by a layout: loads would write into it.
- Every integer argument is checked against the C type it becomes (and the
  range the call documents): TypeError for str, float and bool, and
  ArgumentOutOfRange (a ValueError and an OverflowError) naming the
  argument, where ctypes used to drop the high bits silently.
- Keys, URIs and names that are not str/bytes are TypeErrors.
- close() waits for calls in flight on other threads (they complete, the
  interpreter does not crash) and refuses when called from inside a call.

The concurrent tests synchronise on state (the guard's count of calls in
flight, events), never on sleeps; a slow fault store only keeps the other
thread inside its call long enough for close() to start meanwhile.
"""

import threading
import time

import pytest

from conftest import LAYERS, PAGE_SIZE, kv_layout, kv_pool, np, tokens
import kvlink as kvl

T = 10.0


def until(cond, what, timeout=T):
    """Waits for a state another thread reaches (a deadline, not a
    sleep-as-correctness: fails the test instead of hanging)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


# ------------------------------------------------------------ read-only

def test_read_only_arrays_refused():
    data = bytes(kv_pool().nbytes)
    ro = np.frombuffer(data, np.float32).reshape(kv_pool().shape)
    assert not ro.flags.writeable
    lay = kvl.Layout("m", PAGE_SIZE)
    with pytest.raises(ValueError, match="add_kv_cache: array is read-only"):
        lay.add_kv_cache(ro)
    with pytest.raises(kvl.InvalidArgument, match="add_array: array is "
                                                  "read-only"):
        lay.add_array("kv", "k", 0, ro[0, 0])
    with pytest.raises(ValueError, match="read-only"):
        lay.add_array("kv", "k", 0, memoryview(b"\0" * 64))
    with pytest.raises(ValueError, match="read-only"):
        lay.add_array("kv", "k", 0, b"\0" * 64)
    # Nothing was described; a writable array still works and loads.
    lay.add_kv_cache(ro.copy())
    lay.finalize()
    assert data == bytes(len(data))
    lay.close()


# ------------------------------------------------------------- integers

def test_layout_integers_checked():
    with pytest.raises(OverflowError, match="page_size: 4294967312"):
        kvl.Layout("m", 2**32 + 16)
    with pytest.raises(ValueError, match="page_size"):
        kvl.Layout("m", -1)
    for bad in ("16", 16.5, True, None):
        with pytest.raises(TypeError, match="page_size"):
            kvl.Layout("m", bad)
    assert kvl.Layout("m", np.uint32(16)).page_size == 16
    with pytest.raises(TypeError, match="model_tag"):
        kvl.Layout(b"m", 16)
    with pytest.raises(OverflowError, match="tp_size"):
        kvl.Layout("m", 16, shard=kvl.Shard(tp_size=2**32 + 1))
    lay = kvl.Layout("m", PAGE_SIZE)
    pool = kv_pool()
    with pytest.raises(TypeError, match="window"):
        lay.add_pool("swa", "trailing", window=2.0)
    lay.add_pool("kv")
    with pytest.raises(OverflowError, match="add_buffer: layer"):
        lay.add_array("kv", "k", 2**32, pool[0, 0])
    with pytest.raises(OverflowError, match="first_layer"):
        lay.add_kv_cache(pool, first_layer=-1)
    with pytest.raises(OverflowError, match="pool: 4294967296"):
        lay.pool_ref(2**32)  # once pool 0
    lay.add_kv_cache(pool)
    lay.finalize()
    with pytest.raises(OverflowError, match="page_pieces: slot"):
        lay.page_pieces("kv", -1)
    with pytest.raises(TypeError, match="layer_range: layer"):
        lay.layer_range("kv", "0")
    with pytest.raises(ValueError, match="hash_pages: page_size"):
        kvl.hash_pages([1, 2], 0)
    with pytest.raises(TypeError, match="hash_pages: page_size"):
        kvl.hash_pages([1, 2], 2.0)
    lay.close()


def test_linker_integers_checked(store):
    lay = kv_layout(kv_pool())
    for opt in ("max_requests", "max_request_pages", "io_batch",
                "gpu_staging"):
        with pytest.raises(OverflowError, match=f"Linker: {opt}"):
            kvl.Linker(lay, store, **{opt: 2**32})
        with pytest.raises(TypeError, match=f"Linker: {opt}"):
            kvl.Linker(lay, store, **{opt: "4"})
    # In range for uint32_t but above the library's limit: its own error.
    with pytest.raises(kvl.InvalidArgument, match="max_requests"):
        kvl.Linker(lay, store, max_requests=2**32 - 1)
    with pytest.raises(kvl.InvalidArgument, match="gpu_staging"):
        kvl.Linker(lay, store, gpu_staging=2**30 + 1)
    # gpu_copy: a GpuCopy, its value or its name.
    for bad in (3, -1, "fast", True, 1.0, None):
        with pytest.raises(ValueError, match="gpu_copy"):
            kvl.Linker(lay, store, gpu_copy=bad)
    for good in (kvl.GpuCopy.DMA, 1, "Kernel", "auto"):
        kvl.Linker(lay, store, gpu_copy=good).close()
    with pytest.raises(OverflowError, match="RankGroup: n_ranks"):
        kvl.RankGroup(0)
    lk = kvl.Linker(lay, store)
    pages = kvl.hash_pages(tokens(2), PAGE_SIZE)
    for bad in (2**64 + 5, -1):
        with pytest.raises(OverflowError, match="load: id"):
            lk.load(bad, pages, [0, 1])
        with pytest.raises(OverflowError, match="offload: id"):
            lk.offload(bad, pages, [0, 1])
        with pytest.raises(OverflowError, match="cancel: id"):
            lk.cancel(bad)
    for bad in ("5", 5.0, True):
        with pytest.raises(TypeError, match="load: id"):
            lk.load(bad, pages, [0, 1])
    with pytest.raises(OverflowError, match="page 1"):
        lk.load(5, pages, [0, 2**64])
    with pytest.raises(OverflowError, match="wait: layer"):
        lk.wait(0, -1)
    with pytest.raises(OverflowError, match="wait: batch"):
        lk.wait(2**64, 0)
    for bad in (-5, 0):
        with pytest.raises(ValueError, match="poll: max_completions"):
            lk.poll(bad)
    with pytest.raises(TypeError, match="poll: max_completions"):
        lk.poll(1.5)
    # The largest id and a numpy id work, and complete under their ids.
    lk.offload(2**64 - 1, pages, [0, 1])
    lk.offload(np.uint64(7), pages, [2, 3])
    got = lk.poll_until([2**64 - 1, 7], T)
    assert got[2**64 - 1].id == 2**64 - 1 and got[7].id == 7
    lk.close()
    lay.close()


def test_store_arguments_checked():
    with pytest.raises(TypeError, match="Store\\(uri\\): expected a str"):
        kvl.Store(123)
    with pytest.raises(kvl.ParseError, match="NUL"):
        kvl.Store("mem:\0?capacity=1")
    with kvl.Store("mem:?capacity=1MiB") as s:
        for bad in (5, None, 1.5):
            with pytest.raises(TypeError, match="keys are str or bytes"):
                s.exists(bad)
        with pytest.raises(TypeError, match="keys are str or bytes"):
            s.put_many([(5, b"x")])
        assert s.put(b"a", b"hello")
        with pytest.raises(TypeError, match="get: size"):
            s.get("a", "5")
        with pytest.raises(OverflowError, match="get_into: offset"):
            s.get("a", 5, offset=-1)
        with pytest.raises(TypeError, match="get_many: size"):
            s.get_many(["a"], 5.0)
        with pytest.raises(OverflowError, match="register: length"):
            s.register(4096, -1)
        assert s.get("a", 5) == b"hello"
        assert s.get_many(["a"], np.int64(5)) == [b"hello"]


# ------------------------------------------------- close while in flight

def test_store_close_waits_for_a_get_in_flight():
    s = kvl.Store("fault+mem:?capacity=1MiB&fault.latency_ms=300")
    s.put("a", b"x" * 4096)
    got = {}

    def reader():
        try:
            got["data"] = s.get("a", 4096)
        except BaseException as e:  # noqa: BLE001 - checked below
            got["error"] = e

    t = threading.Thread(target=reader)
    t.start()
    until(lambda: s._guard.in_flight > 0, "the get to start")
    closer = threading.Thread(target=s.close)
    closer.start()
    until(lambda: s._guard._closing or s.closed, "close to start")
    if not s.closed:  # close waits for the get: new calls are refused
        with pytest.raises(kvl.StateError, match="closing|closed"):
            s.exists("a")
    closer.join(T)
    t.join(T)
    assert not closer.is_alive() and not t.is_alive()
    assert "error" not in got, got
    assert got["data"] == b"x" * 4096  # the get finished, then the close
    assert s.closed and s._guard.in_flight == 0
    with pytest.raises(kvl.StateError, match="closed"):
        s.get("a", 1)
    s.close()  # twice: harmless


def test_layout_close_waits_for_queries_in_flight():
    lay = kv_layout(kv_pool())
    started, release = threading.Event(), threading.Event()

    @kvl._args.guarded
    def slow_query(self):  # a query that blocks inside the guard
        started.set()
        release.wait(T)
        return self.pool_info(0)  # nested calls finish while closing

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("info",
                                                       slow_query(lay)))
    t.start()
    assert started.wait(T)
    closer = threading.Thread(target=lay.close)
    closer.start()
    until(lambda: lay._guard._closing, "close to start")
    assert not lay.closed  # waiting for the query
    with pytest.raises(kvl.StateError, match="closing"):
        lay.pool_info(0)  # new calls are refused meanwhile
    release.set()
    closer.join(T)
    t.join(T)
    assert out["info"].name == "kv"
    assert lay.closed and lay._guard.in_flight == 0


def test_linker_close_wakes_and_waits_for_a_wait_in_flight(store):
    pool = kv_pool()
    lay = kv_layout(pool)
    with kvl.Store("fault+mem:?capacity=1MiB&fault.latency_ms=300") as st:
        lk = kvl.Linker(lay, st)
        pages = kvl.hash_pages(tokens(1), PAGE_SIZE)
        lk.load(1, pages, [0])
        b = lk.start()
        out = {}

        def waiter():
            try:
                lk.wait(b, LAYERS - 1, timeout=T)
                out["ok"] = True
            except kvl.KvlinkError as e:
                out["error"] = e

        t = threading.Thread(target=waiter)
        t.start()
        until(lambda: lk._guard.in_flight > 0, "the wait to start")
        lk.close()  # wakes the waiter, waits for it, then frees
        t.join(T)
        assert not t.is_alive()
        assert "error" in out or "ok" in out
        if "error" in out:  # canceled, or the page was never stored
            assert isinstance(out["error"], (kvl.Canceled, kvl.NotFound))
        assert lk.closed and lk._guard.in_flight == 0
        with pytest.raises(kvl.StateError, match="closed"):
            lk.poll()
    lay.close()


def test_linker_close_from_its_own_callback_refused(store):
    lay = kv_layout(kv_pool())
    holder = {}

    def allreduce(bits):
        holder["lk"].close()  # inside lookup on this linker

    lk = kvl.Linker(lay, store, allreduce=allreduce)
    holder["lk"] = lk
    with pytest.raises(kvl.StateError, match="from inside a call"):
        lk.lookup(kvl.hash_pages(tokens(2), PAGE_SIZE))
    assert not lk.closed
    lk.close()
    lay.close()


def test_linker_close_wakes_a_poll_without_limit(store):
    lay = kv_layout(kv_pool())
    lk = kvl.Linker(lay, store)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "got", lk.poll(timeout=None)))
    t.start()
    until(lambda: lk._guard.in_flight > 0, "the poll to start")
    lk.close()  # the shutdown wakes the poll: nothing can arrive
    t.join(T)
    assert not t.is_alive() and out["got"] == []
    lay.close()
