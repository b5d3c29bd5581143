# SPDX-License-Identifier: Apache-2.0
"""Stores: where page objects live, opened by URI.

``Store("mem:?capacity=8GiB")`` opens the embedded store of this process;
``"fault+mem:?fault.error=0.05"`` wraps a store with fault injection and
``"redis://host:port"`` reaches Redis where the build has it (see
docs/stores.md). The methods here read and write whole objects or ranges by
key; engines normally leave that to a :class:`~kvlink.Linker`.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._args import c_int, guarded
from ._buffers import buffer_ptr
from ._lib import kvl_iov, kvl_range, lib
from ._shared import SharedHandle
from .errors import InvalidArgument, ParseError, StateError, check, \
    make_error
from .layout import MemKind

Buffer = Any
"""Host memory: bytes, bytearray, memoryview, a numpy array or a CPU torch
tensor (C-contiguous)."""

_UNKNOWN = (1 << 64) - 1  # UINT64_MAX: a count the store cannot tell

_FORMATS = {"prometheus": _lib.KVL_STATS_PROMETHEUS,
            "json": _lib.KVL_STATS_JSON}


def stats_format(fmt: Union[str, int]) -> int:
    if isinstance(fmt, str):
        try:
            return _FORMATS[fmt.lower()]
        except KeyError:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"unknown stats format {fmt!r} "
                                  f"(json, prometheus)") from None
    return c_int(fmt, "int", "stats format")


def _keys(keys: Sequence[str]):
    if isinstance(keys, (str, bytes)):
        raise TypeError("expected a sequence of keys, got one key")
    enc = []
    for k in keys:
        if isinstance(k, str):
            b = k.encode()
        elif isinstance(k, (bytes, bytearray)):
            b = bytes(k)
        else:
            raise TypeError(f"key: keys are str or bytes, got "
                            f"{type(k).__name__} {k!r}")
        if b"\0" in b:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"key {k!r} holds a NUL character")
        enc.append(b)
    return (ctypes.c_char_p * max(len(enc), 1))(*enc), len(enc)


def render(fn, handle, fmt: Union[str, int], errmsg) -> str:
    """Runs a kvl_*_stats renderer, growing the buffer as needed."""
    f = stats_format(fmt)
    size = 16384
    for _ in range(8):
        buf = ctypes.create_string_buffer(size)
        needed = ctypes.c_size_t(0)
        rc = fn(handle, f, buf, size, ctypes.byref(needed))
        if rc == _lib.KVL_ERANGE and needed.value + 1 > size:
            size = needed.value + 1 + 4096
            continue
        check(rc, errmsg, "stats")
        return buf.value.decode()
    raise make_error(_lib.KVL_ERANGE, None, "stats kept growing")


def parse_size(text: str) -> int:
    """A byte size as store options take them: decimal digits and an optional
    suffix K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024, either case),
    e.g. ``parse_size("8GiB") == 8 << 30``.

    Raises:
        ParseError: empty, a bad suffix, 2^64 or more.
        TypeError: not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_size: expected a string, got "
                        f"{type(text).__name__}")
    if "\0" in text:
        raise ParseError(_lib.KVL_EPARSE,
                         f"parse_size({text!r}): holds a NUL character")
    out = ctypes.c_uint64(0)
    rc = lib.kvl_parse_size(text.encode(), ctypes.byref(out))
    if rc == _lib.KVL_EPARSE:
        raise ParseError(rc, f"parse_size({text!r}): not a size (digits and "
                         f"an optional suffix K, M, G, T or KiB, MiB, GiB, "
                         f"TiB, below 2^64)")
    check(rc, context=f"parse_size({text!r})")
    return out.value


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown: the password of its credentials (and the
    value of an option named password, pass, passwd or ``*_password``)
    replaced by ``***``, e.g. ``redact_uri("redis://u:pw@h:1") ==
    "redis://u:***@h:1"`` (kvl_uri_redact). ``repr(Store)`` and the
    messages of a failed open show URIs this way.

    Raises:
        TypeError: not a string.
    """
    if not isinstance(uri, str):
        raise TypeError(f"redact_uri: expected a string, got "
                        f"{type(uri).__name__}")
    raw = uri.encode(errors="surrogateescape").split(b"\0", 1)[0]
    size = 2 * len(raw) + 16  # "***" for a 1-byte secret: 2 more bytes
    while True:
        buf = ctypes.create_string_buffer(size)
        rc = lib.kvl_uri_redact(raw, buf, size)
        if rc != _lib.KVL_ERANGE:
            check(rc, context="redact_uri")
            return buf.value.decode(errors="replace")
        size *= 2


def mem_policy_names() -> Tuple[str, ...]:
    """The eviction policies of the embedded store, default first
    (``("adaptive", "slru", "lru")``): what ``mem:``'s ``policy=`` option takes."""
    names: List[str] = []
    while True:
        name = lib.kvl_mem_policy_name(len(names))
        if name is None:
            return tuple(names)
        names.append(name.decode())


class Store(SharedHandle):
    """A store opened from a URI (``None`` or ``""``: ``"mem:"``).

    Raises:
        ParseError: malformed URI or option (the message names it).
        NotSupported: unknown scheme, or a backend this build lacks.
        StoreIOError: the backend is unreachable.

    Thread-safe: any number of threads may use one store; :meth:`close`
    waits for the calls other threads have in flight. Usable as a context
    manager.

    Raises:
        TypeError: ``uri`` is not a str.
    """

    _what = "store"

    def __init__(self, uri: Optional[str] = "mem:"):
        super().__init__(_lib.StoreP())
        self._registered: List[Any] = []
        if uri is not None and not isinstance(uri, str):
            raise TypeError(f"Store(uri): expected a str URI such as "
                            f"\"mem:\", got {type(uri).__name__} {uri!r}")
        self.uri = uri or "mem:"
        if "\0" in self.uri:
            raise ParseError(_lib.KVL_EPARSE,
                             f"store URI {self.uri!r} holds a NUL character")
        err = ctypes.create_string_buffer(512)
        rc = lib.kvl_store_open(self.uri.encode(), ctypes.byref(self._h), err,
                                len(err))
        check(rc, lambda: err.value.decode(errors="replace"),
              f"open store {redact_uri(self.uri)!r}")

    @classmethod
    def open(cls, uri: Optional[str] = "mem:") -> "Store":
        """Same as ``Store(uri)``."""
        return cls(uri)

    @property
    def _handle(self):
        if not self._h:
            raise StateError(_lib.KVL_ESTATE, "the store is closed")
        return self._h

    def _errmsg(self) -> str:
        return lib.kvl_store_errmsg(self._h).decode(errors="replace")

    def _key_error(self, code: int, key: str, op: str):
        return make_error(code, None, f"{op} {key!r}")

    # ---------------------------------------------------------- objects

    @guarded
    def exists_many(self, keys: Sequence[str]) -> List[bool]:
        """Which of ``keys`` are present (one batched query). Raises the
        first per-key error."""
        arr, n = _keys(keys)
        res = (ctypes.c_int * max(n, 1))()
        check(lib.kvl_store_exists(self._handle, arr, n, res), self._errmsg,
              "exists")
        out = []
        for i in range(n):
            if res[i] < 0:
                raise self._key_error(res[i], keys[i], "exists")
            out.append(bool(res[i]))
        return out

    def exists(self, key: str) -> bool:
        """True if an object is stored under ``key``."""
        return self.exists_many([key])[0]

    @guarded
    def get_into(self, key: str, buffer: Buffer, offset: int = 0) -> int:
        """Reads ``len(buffer)`` bytes of object ``key``, from ``offset``,
        into ``buffer`` (writable host memory). Returns the bytes read:
        all of ``buffer`` (a range is read whole or the call raises).

        Raises:
            NotFound: no such object (nothing was written).
            OutOfRange: the range goes beyond the object.
        """
        offset = c_int(offset, "uint64_t", "get_into: offset")
        addr, n, keep = buffer_ptr(buffer, writable=True, what="get_into")
        arr, _ = _keys([key])
        rng = kvl_range(offset=offset, addr=addr, len=n)
        n_ranges = ctypes.c_size_t(1)
        res = ctypes.c_int(0)
        check(lib.kvl_store_get(self._handle, arr, 1, ctypes.byref(rng),
                                ctypes.byref(n_ranges), ctypes.byref(res)),
              self._errmsg, "get")
        del keep
        if res.value < 0:
            raise self._key_error(res.value, key, "get")
        return n

    def get(self, key: str, size: int, offset: int = 0) -> bytes:
        """``size`` bytes of object ``key`` from ``offset``, as bytes.

        The store API has no size query: for a page object use
        :meth:`Layout.object_size` (an object's whole size).

        Raises:
            NotFound, OutOfRange: as :meth:`get_into`.
        """
        buf = bytearray(c_int(size, "size_t", "get: size"))
        self.get_into(key, buf, offset)
        return bytes(buf)

    @guarded
    def get_many(self, keys: Sequence[str], size: Union[int, Sequence[int]]
                 ) -> List[Optional[bytes]]:
        """Reads whole objects of known size in one call: ``size`` is one
        size for all or one per key. Absent keys give None; other per-key
        errors raise."""
        one = not isinstance(size, (list, tuple)) and \
            not hasattr(size, "__len__")
        each: Sequence[Any] = [size] * len(keys) if one else \
            list(size)  # type: ignore[arg-type]
        sizes = [c_int(z, "size_t", "get_many: size") for z in each]
        if len(sizes) != len(keys):
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"get_many: {len(keys)} keys, "
                                  f"{len(sizes)} sizes")
        arr, n = _keys(keys)
        if n == 0:
            return []
        bufs = [bytearray(s) for s in sizes]
        ranges = (kvl_range * n)()
        keep = []
        for i, b in enumerate(bufs):
            addr, ln, k = buffer_ptr(b, writable=True)
            keep.append(k)
            ranges[i] = kvl_range(0, addr, ln)
        n_ranges = _lib.size_t_array([1] * n)
        res = (ctypes.c_int * n)()
        check(lib.kvl_store_get(self._handle, arr, n, ranges, n_ranges, res),
              self._errmsg, "get")
        out: List[Optional[bytes]] = []
        for i in range(n):
            if res[i] == _lib.KVL_ENOTFOUND:
                out.append(None)
            elif res[i] < 0:
                raise self._key_error(res[i], keys[i], "get")
            else:
                out.append(bytes(bufs[i]))
        del keep
        return out

    @guarded
    def put_many(self, items: Sequence[Tuple[str, Union[Buffer,
                                                     Sequence[Buffer]]]]
                 ) -> List[bool]:
        """Stores objects if absent, in one call. Each item is ``(key,
        data)``, data being one buffer or a list of pieces (concatenated).
        Returns per item True (newly stored) or False (already present).

        Raises:
            Full: no room (everything evictable is in use).
            OutOfRange: an object larger than the store's capacity.
        """
        keys = [k for k, _ in items]
        arr, n = _keys(keys)
        if n == 0:
            return []
        pieces: List[Tuple[int, int]] = []
        counts = []
        keep = []
        for _, data in items:
            parts = data if isinstance(data, (list, tuple)) else [data]
            counts.append(len(parts))
            for p in parts:
                addr, ln, k = buffer_ptr(p, writable=False, what="put")
                keep.append(k)
                pieces.append((addr, ln))
        iov = (kvl_iov * max(len(pieces), 1))(*[kvl_iov(a, ln)
                                                for a, ln in pieces])
        n_pieces = _lib.size_t_array(counts)
        res = (ctypes.c_int * n)()
        check(lib.kvl_store_put(self._handle, arr, n, iov, n_pieces, res),
              self._errmsg, "put")
        del keep
        out = []
        for i in range(n):
            if res[i] < 0:
                raise self._key_error(res[i], keys[i], "put")
            out.append(res[i] == _lib.KVL_PUT_STORED)
        return out

    def put(self, key: str, data: Union[Buffer, Sequence[Buffer]]) -> bool:
        """Stores ``data`` (a buffer, or a list of pieces) under ``key`` if
        absent. True if newly stored, False if it was already there."""
        return self.put_many([(key, data)])[0]

    @guarded
    def remove_many(self, keys: Sequence[str]) -> List[bool]:
        """Removes keys; per key True if it was there."""
        arr, n = _keys(keys)
        res = (ctypes.c_int * max(n, 1))()
        check(lib.kvl_store_remove(self._handle, arr, n, res), self._errmsg,
              "remove")
        out = []
        for i in range(n):
            if res[i] < 0:
                raise self._key_error(res[i], keys[i], "remove")
            out.append(bool(res[i]))
        return out

    def remove(self, key: str) -> bool:
        """Removes ``key``; True if it was there."""
        return self.remove_many([key])[0]

    @guarded
    def register(self, memory: Any, length: Optional[int] = None,
                 mem: Union[MemKind, int] = MemKind.HOST) -> None:
        """Announces memory that transfers will touch (pool buffers,
        staging), for backends that pin or register it. ``memory`` is an
        address (then ``length`` is needed) or an array/tensor/buffer, which
        the store then keeps alive."""
        if isinstance(memory, int):
            if length is None:
                raise InvalidArgument(_lib.KVL_EINVAL,
                                      "register: an address needs a length")
            addr = c_int(memory, "uintptr_t", "register: address")
            n = c_int(length, "size_t", "register: length")
        else:
            from ._buffers import array_info
            info = array_info(memory, "register")
            addr, n, mem = info.ptr, info.itemsize, info.mem
            for d in info.shape:
                n *= d
            if length is not None:
                n = c_int(length, "size_t", "register: length")
            self._registered.append(memory)
        check(lib.kvl_store_register(self._handle, addr, n,
                                     c_int(mem, "int", "register: mem")),
              self._errmsg, "register")

    # ------------------------------------------------------------ stats

    @guarded
    def stats(self) -> Dict[str, Optional[int]]:
        """The store's counters: objects, bytes, capacity, hits, misses,
        puts, evictions, errors. A count the store cannot tell (a remote
        store with a node down) is None, as in :meth:`stats_json`."""
        s = _lib.kvl_store_stats()
        check(lib.kvl_store_stats_get(self._handle, ctypes.byref(s)),
              self._errmsg, "stats")
        return {name: None if getattr(s, name) == _UNKNOWN else
                getattr(s, name) for name, _ in s._fields_}

    @property
    def note(self) -> str:
        """What the store says about an option it accepted but cannot
        honour here (``mem:``'s ``pinned=1`` or ``prealloc=1`` without a
        usable CUDA device), or ``""``: the same text as the stats
        renders' note."""
        return self.stats_json().get("note", "")

    @guarded
    def render_stats(self, format: Union[str, int] = "json") -> str:
        """The store's stats as text: ``"json"`` or ``"prometheus"``."""
        return render(lib.kvl_store_stats_render, self._handle, format,
                      self._errmsg)

    def stats_json(self) -> Dict[str, Any]:
        """:meth:`render_stats` in JSON, parsed."""
        return json.loads(self.render_stats("json"))

    # ---------------------------------------------------------- lifetime

    def __copy__(self) -> "Store":
        return self

    def __deepcopy__(self, memo: Any) -> "Store":
        """A store is a handle on one open store: copies share it (an
        engine's config holding a Store may be deep-copied)."""
        return self

    def _free(self) -> None:
        lib.kvl_store_close(self._h)
        self._h = _lib.StoreP()
        self._registered.clear()

    def __repr__(self) -> str:
        shown = redact_uri(self.uri)
        return f"<kvlink.Store {shown!r}{' closed' if self.closed else ''}>"


__all__ = ["Store", "Buffer", "parse_size", "mem_policy_names", "redact_uri"]
