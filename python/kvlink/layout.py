# SPDX-License-Identifier: Apache-2.0
"""Layouts: the engine's page pools, described once.

A :class:`Layout` says, for each pool and model layer, where each component's
page slots live (base address, page stride, bytes per page, host or CUDA).
Build it, then :meth:`Layout.finalize` it; a finalized layout is immutable and
may be shared by any number of linkers and threads.

Buffers can be given as raw addresses (:meth:`Layout.add_buffer`), as one
array or tensor per layer and component (:meth:`Layout.add_array`), or as one
tensor holding a whole paged KV pool (:meth:`Layout.add_kv_cache`). The layout
keeps a reference to every array it was given, so the memory stays alive
while the layout (and any linker using it) does.
"""

from __future__ import annotations

import ctypes
import enum
import re
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, \
    Union

from . import _lib
from ._args import c_int, c_text, guarded
from ._buffers import ArrayInfo, array_info, dtype_name
from ._lib import kvl_buffer, kvl_hash, kvl_shard, lib
from ._shared import SharedHandle
from .errors import InvalidArgument, StateError, check
from .hashes import HashLike, _one_hash


class MemKind(enum.IntEnum):
    """Where a buffer's memory is."""
    HOST = _lib.KVL_MEM_HOST  #: ordinary or pinned host memory
    CUDA = _lib.KVL_MEM_CUDA  #: memory of a CUDA device


class HitPolicy(enum.IntEnum):
    """Which pages of a prefix a pool needs to restore it."""
    ALL_PAGES = _lib.KVL_HIT_ALL_PAGES            #: every page (attention)
    TRAILING_PAGES = _lib.KVL_HIT_TRAILING_PAGES  #: the last ``window`` pages


_POLICY_NAMES = {"all": HitPolicy.ALL_PAGES, "all_pages": HitPolicy.ALL_PAGES,
                 "trailing": HitPolicy.TRAILING_PAGES,
                 "trailing_pages": HitPolicy.TRAILING_PAGES}


@dataclass(frozen=True)
class Shard:
    """One rank's place in the model's parallelism (ranks < sizes)."""
    tp_rank: int = 0
    tp_size: int = 1
    cp_rank: int = 0
    cp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1

    def _c(self) -> kvl_shard:
        return kvl_shard(*[c_int(getattr(self, f), "uint32_t", f"shard.{f}")
                           for f in ("tp_rank", "tp_size", "cp_rank",
                                     "cp_size", "pp_rank", "pp_size")])


class PoolInfo(NamedTuple):
    """A pool of a finalized layout."""
    id: int
    name: str
    policy: HitPolicy
    window: int
    replicated_tp: bool
    layers: Tuple[int, ...]  #: model layers the pool has, ascending
    pages: int               #: page slots of its buffers
    object_size: int         #: bytes of one page's store object
    header_size: int         #: the object header's share of object_size


PoolRef = Union[int, str]
"""A pool: its id (0, 1, … in order of addition) or its name."""


_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _bad(msg: str) -> InvalidArgument:
    return InvalidArgument(_lib.KVL_EINVAL, msg)


def _contiguous_bytes(info: ArrayInfo, start: int, what: str) -> int:
    """Bytes of dims start.. of ``info`` if they are C-contiguous."""
    expect = info.itemsize
    for d in range(len(info.shape) - 1, start - 1, -1):
        n = info.shape[d]
        if n != 1 and info.strides[d] != expect:
            raise _bad(f"{what}: the dimensions that make up one page "
                       f"(shape {info.shape[start:]}, strides "
                       f"{info.strides[start:]} bytes) are not contiguous")
        expect *= n
    return expect


class Layout(SharedHandle):
    """The engine's page pools for one model and rank.

    Args:
        model_tag: names the model and KV dtype, e.g. ``"llama3-8b/bf16"``
            (1..64 characters from ``[A-Za-z0-9._+/-]``).
        page_size: tokens per page.
        shard: this rank's place in the parallelism (default: one rank).

    Raises:
        InvalidArgument: bad tag, page size or shard.

    Not thread-safe while being built; immutable and thread-safe once
    finalized. Usable as a context manager (closes on exit).
    """

    _what = "layout"

    def __init__(self, model_tag: str, page_size: int,
                 shard: Optional[Shard] = None):
        super().__init__(_lib.LayoutP())
        self._keep: List[Any] = []
        self._pool_ids: Dict[str, int] = {}
        self._pool_names: List[str] = []
        self._finalized = False
        err = ctypes.create_string_buffer(256)
        tag = c_text(model_tag, "Layout: model_tag")
        page_size = c_int(page_size, "uint32_t", "Layout: page_size")
        if shard is not None and not isinstance(shard, Shard):
            raise TypeError(f"Layout: shard must be a kvlink.Shard, got "
                            f"{type(shard).__name__}")
        sh = shard._c() if shard is not None else None
        rc = lib.kvl_layout_create(
            tag, page_size,
            ctypes.byref(sh) if sh is not None else None,
            ctypes.byref(self._h), err, len(err))
        check(rc, lambda: err.value.decode(errors="replace"))
        self.model_tag = model_tag

    # ------------------------------------------------------------ internals

    @property
    def _handle(self):
        if not self._h:
            raise StateError(_lib.KVL_ESTATE, "the layout is closed")
        return self._h

    def _errmsg(self) -> str:
        return lib.kvl_layout_errmsg(self._h).decode(errors="replace")

    def _check(self, rc: int, context: Optional[str] = None) -> int:
        return check(rc, self._errmsg, context)

    @guarded
    def pool_ref(self, pool: PoolRef) -> int:
        """The id of ``pool`` (an id or a name)."""
        if isinstance(pool, str):
            if pool in self._pool_ids:
                return self._pool_ids[pool]
            if self._finalized:
                out = ctypes.c_int()
                self._check(lib.kvl_layout_pool_id(self._handle,
                                                   pool.encode(),
                                                   ctypes.byref(out)))
                return out.value
            raise _lib_notfound(f"no pool named {pool!r}")
        if isinstance(pool, bool) or not hasattr(pool, "__index__"):
            raise TypeError(f"pool: expected an id or a name, got "
                            f"{type(pool).__name__}")
        return c_int(pool, "int", "pool")

    # ---------------------------------------------------------- building

    @guarded
    def add_pool(self, name: str,
                 policy: Union[HitPolicy, str] = HitPolicy.ALL_PAGES,
                 window: int = 0, *, replicated_tp: bool = False,
                 dtype: Any = None,
                 memory_layout: Optional[str] = "") -> int:
        """Adds a pool and returns its id.

        Args:
            name: unique, 1..64 characters from ``[A-Za-z0-9._-]``.
            policy: ``HitPolicy.ALL_PAGES`` / ``"all"`` (full attention) or
                ``HitPolicy.TRAILING_PAGES`` / ``"trailing"`` (sliding
                window, recurrent state).
            window: pages needed by a trailing pool (≥ 1); 0 for ALL_PAGES.
            replicated_tp: the pages are identical on every tensor-parallel
                rank (MLA latent): keys leave out the tp rank and only tp
                rank 0 writes them.
            dtype: the element type (e.g. ``"bfloat16"``; a numpy or torch
                dtype is named for you), and memory_layout the order of a
                page's bytes (e.g. ``"NHD"``): both join the pool's
                fingerprint and keys, so layouts that differ in them never
                share objects whatever their model tags say. None: not
                declared (the fingerprint of earlier versions).
        """
        if isinstance(policy, str):
            try:
                policy = _POLICY_NAMES[policy.lower()]
            except KeyError:
                raise _bad(f"add_pool {name!r}: unknown hit policy "
                           f"{policy!r} (all, trailing)") from None
        dtype_text = None if dtype is None else dtype_name(dtype)
        if dtype_text is None and memory_layout:
            raise _bad(f"add_pool {name!r}: memory_layout "
                       f"{memory_layout!r} needs a dtype")
        # Checked before the pool is added, which cannot be undone.
        for what, text in (("dtype", dtype_text),
                           ("memory_layout", memory_layout or None)):
            if text is not None and not _NAME_RE.fullmatch(text):
                raise _bad(f"add_pool {name!r}: {what} must be 1..64 "
                           f"characters from [A-Za-z0-9._-], got {text!r}")
        out = ctypes.c_int(-1)
        flags = _lib.KVL_POOL_REPLICATED_TP if replicated_tp else 0
        self._check(lib.kvl_layout_add_pool(
            self._handle, c_text(name, "add_pool: name"),
            c_int(policy, "int", "add_pool: policy"),
            c_int(window, "uint32_t", "add_pool: window"), flags,
            ctypes.byref(out)))
        if dtype_text is not None:
            self._check(lib.kvl_layout_pool_format(
                self._handle, out.value, c_text(dtype_text, "add_pool: dtype"),
                c_text(memory_layout or "", "add_pool: memory_layout")))
        self._pool_ids[name] = out.value
        self._pool_names.append(name)
        return out.value

    @guarded
    def add_buffer(self, pool: PoolRef, component: str, layer: int,
                   base: int, page_stride: int, page_bytes: int,
                   num_pages: int, mem: Union[MemKind, int] = MemKind.HOST,
                   device: int = 0, *, keep: Any = None) -> None:
        """Describes one component of one layer of a pool from a raw address:
        slot ``s`` lives at ``base + s * page_stride`` and is ``page_bytes``
        long. ``keep``: an object to keep alive with the layout (the owner of
        the memory). ``base`` and ``page_stride`` must be multiples of 8."""
        buf = kvl_buffer(
            base=c_int(base, "uintptr_t", "add_buffer: base"),
            page_stride=c_int(page_stride, "size_t",
                              "add_buffer: page_stride"),
            page_bytes=c_int(page_bytes, "size_t", "add_buffer: page_bytes"),
            num_pages=c_int(num_pages, "size_t", "add_buffer: num_pages"),
            mem=c_int(mem, "int", "add_buffer: mem"),
            device=c_int(device, "int", "add_buffer: device"))
        self._check(lib.kvl_layout_add_buffer(
            self._handle, self.pool_ref(pool),
            c_text(component, "add_buffer: component"),
            c_int(layer, "uint32_t", "add_buffer: layer"),
            ctypes.byref(buf)))
        if keep is not None:
            self._keep.append(keep)

    @guarded
    def add_shape(self, pool: PoolRef, component: str, layer: int,
                  page_bytes: int) -> None:
        """Describes one component of one layer by its size only: a layout
        of shapes names pages and keys as the same layout with memory does,
        for a process without the engine's buffers (a :class:`Prober`); no
        linker opens on it. A layout is all shapes or all memory."""
        self._check(lib.kvl_layout_add_shape(
            self._handle, self.pool_ref(pool),
            c_text(component, "add_shape: component"),
            c_int(layer, "uint32_t", "add_shape: layer"),
            c_int(page_bytes, "size_t", "add_shape: page_bytes")))

    def add_array(self, pool: PoolRef, component: str, layer: int,
                  array: Any, *, tokens: bool = False) -> None:
        """Describes one component of one layer from an array or tensor
        whose first dimension is the page slot (``array[s]`` is slot ``s``)
        and whose other dimensions, which must be contiguous, make up one
        page. With ``tokens=True`` the first dimension counts tokens instead,
        and a page is ``page_size`` consecutive tokens (a token-indexed pool
        such as ``[tokens, heads, head_dim]``).

        numpy arrays, torch tensors (CPU or CUDA: the device is taken from
        the tensor) and objects with ``__cuda_array_interface__`` work. The
        array is kept alive by the layout."""
        info = array_info(array, f"add_array {component} layer {layer}")
        _writable(info, "add_array: array")
        if not info.shape:
            raise _bad("add_array: a 0-d array has no page dimension")
        self._add_info(pool, component, layer, info, info.ptr, 0, 1,
                       tokens)
        self._keep.extend((array, info.keep))

    def _add_info(self, pool, component, layer, info: ArrayInfo, base: int,
                  p_axis: int, trailing: int, tokens: bool) -> None:
        what = f"{component} layer {layer}"
        inner = _contiguous_bytes(info, trailing, what)
        n = info.shape[p_axis]
        stride = info.strides[p_axis]
        if stride < 0:
            raise _bad(f"{what}: negative page stride")
        if tokens:
            ps = self.page_size
            if n % ps:
                raise _bad(f"{what}: {n} tokens is not a whole number of "
                           f"{ps}-token pages")
            if n > 1 and stride != inner:
                raise _bad(f"{what}: tokens are not contiguous (token "
                           f"stride {stride} bytes, token size {inner})")
            n, stride, inner = n // ps, inner * ps, inner * ps
        elif n == 1:
            stride = inner  # a single slot: any stride describes it
        self.add_buffer(pool, component, layer, base, stride, inner, n,
                        info.mem, info.device)

    def add_kv_cache(self, array: Any, dims: str = "LCP", *,
                     pool: PoolRef = "kv",
                     components: Optional[Sequence[str]] = None,
                     first_layer: int = 0, tokens: bool = False) -> int:
        """Describes a whole paged KV pool tensor in one call and returns the
        pool id (a pool named ``pool`` that does not exist yet is added with
        the ALL_PAGES policy).

        Args:
            array: a numpy array or torch tensor (CPU or CUDA).
            dims: the meaning of the array's leading dimensions, in order:
                ``L`` model layer, ``P`` page slot and, if present, ``C``
                component (K, V). The dimensions after them make up one page
                and must be contiguous. Examples:
                ``[layers, 2, pages, page_size, heads, dim]`` → ``"LCP"``;
                ``[pages, layers, 2, page_size, heads, dim]`` → ``"PLC"``;
                ``[2, layers, pages, …]`` → ``"CLP"``; an MLA latent
                ``[layers, pages, page_size, dim]`` → ``"LP"``.
            components: names of the ``C`` entries; default ``("k", "v")``,
                or ``("kv",)`` when there is no ``C`` dimension.
            first_layer: model layer of index 0 of ``L`` (a pipeline stage).
            tokens: ``P`` counts tokens, not pages (page = ``page_size``
                consecutive tokens), e.g. ``[layers, 2, tokens, heads, dim]``.
        """
        dims = dims.upper()
        if sorted(dims) not in (sorted("LCP"), sorted("LP")):
            raise _bad(f"add_kv_cache: dims {dims!r} must order the letters "
                       f"L, P and optionally C")
        info = array_info(array, "add_kv_cache")
        _writable(info, "add_kv_cache: array")
        first_layer = c_int(first_layer, "uint32_t", "add_kv_cache: "
                            "first_layer")
        if len(info.shape) < len(dims):
            raise _bad(f"add_kv_cache: shape {info.shape} has fewer than "
                       f"{len(dims)} dimensions ({dims})")
        ax = {c: i for i, c in enumerate(dims)}
        n_comp = info.shape[ax["C"]] if "C" in ax else 1
        if components is None:
            components = ("k", "v") if "C" in ax else ("kv",)
        components = tuple(components)
        if len(components) != n_comp:
            raise _bad(f"add_kv_cache: {n_comp} components in the array "
                       f"(dimension C), {len(components)} names "
                       f"{components}")
        if isinstance(pool, str) and pool not in self._pool_ids:
            pid = self.add_pool(pool)
        else:
            pid = self.pool_ref(pool)
        for li in range(info.shape[ax["L"]]):
            for ci, comp in enumerate(components):
                base = info.ptr + li * info.strides[ax["L"]]
                if "C" in ax:
                    base += ci * info.strides[ax["C"]]
                self._add_info(pid, comp, first_layer + li, info, base,
                               ax["P"], len(dims), tokens)
        self._keep.append(array)
        return pid

    @guarded
    def finalize(self) -> "Layout":
        """Checks the description (no overlaps, every layer of a pool has the
        same components) and freezes it. Returns the layout."""
        self._check(lib.kvl_layout_finalize(self._handle))
        self._finalized = True
        return self

    # ------------------------------------------------------------ queries

    @property
    def finalized(self) -> bool:
        return self._finalized

    @property
    @guarded
    def page_size(self) -> int:
        """Tokens per page."""
        return int(lib.kvl_layout_page_size(self._handle))

    @property
    @guarded
    def shard(self) -> Shard:
        s = lib.kvl_layout_shard(self._handle)
        return Shard(s.tp_rank, s.tp_size, s.cp_rank, s.cp_size, s.pp_rank,
                     s.pp_size)

    @property
    @guarded
    def pool_count(self) -> int:
        if not self._finalized:
            return len(self._pool_names)
        out = ctypes.c_int()
        self._check(lib.kvl_layout_pool_count(self._handle,
                                              ctypes.byref(out)))
        return out.value

    def pool_id(self, name: str) -> int:
        """The id of the pool called ``name`` (NotFound if none)."""
        return self.pool_ref(name)

    @guarded
    def pool_info(self, pool: PoolRef) -> PoolInfo:
        """Everything about one pool of a finalized layout."""
        pid = self.pool_ref(pool)
        name = ctypes.c_char_p()
        policy = ctypes.c_int()
        window = ctypes.c_uint32()
        flags = ctypes.c_uint32()
        self._check(lib.kvl_layout_pool_info(
            self._handle, pid, ctypes.byref(name), ctypes.byref(policy),
            ctypes.byref(window), ctypes.byref(flags)))
        size, header = self.object_size(pid)
        return PoolInfo(pid, (name.value or b"").decode(),
                        HitPolicy(policy.value),
                        window.value,
                        bool(flags.value & _lib.KVL_POOL_REPLICATED_TP),
                        self.pool_layers(pid), self.pool_pages(pid), size,
                        header)

    @property
    def pools(self) -> List[PoolInfo]:
        """Every pool of a finalized layout, by id."""
        return [self.pool_info(i) for i in range(self.pool_count)]

    @guarded
    def pool_layers(self, pool: PoolRef) -> Tuple[int, ...]:
        """The model layers ``pool`` has, ascending."""
        pid = self.pool_ref(pool)
        n = ctypes.c_size_t(0)
        rc = lib.kvl_layout_pool_layers(self._handle, pid, None, 0,
                                        ctypes.byref(n))
        if rc != _lib.KVL_ERANGE:
            self._check(rc)
        arr = (ctypes.c_uint32 * max(n.value, 1))()
        self._check(lib.kvl_layout_pool_layers(self._handle, pid, arr,
                                               n.value, ctypes.byref(n)))
        return tuple(arr[:n.value])

    @guarded
    def pool_pages(self, pool: PoolRef) -> int:
        """Number of page slots of ``pool``'s buffers."""
        out = ctypes.c_size_t()
        self._check(lib.kvl_layout_pool_pages(self._handle,
                                              self.pool_ref(pool),
                                              ctypes.byref(out)))
        return out.value

    @guarded
    def object_size(self, pool: PoolRef) -> Tuple[int, int]:
        """(object size, header size) of one page of ``pool`` in the
        store."""
        size, header = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(lib.kvl_layout_object_size(
            self._handle, self.pool_ref(pool), ctypes.byref(size),
            ctypes.byref(header)))
        return size.value, header.value

    @guarded
    def layer_range(self, pool: PoolRef, layer: int) -> Tuple[int, int]:
        """(offset, length) of model layer ``layer`` inside an object."""
        off, ln = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(lib.kvl_layout_layer_range(
            self._handle, self.pool_ref(pool),
            c_int(layer, "uint32_t", "layer_range: layer"), ctypes.byref(off),
            ctypes.byref(ln)))
        return off.value, ln.value

    @guarded
    def page_pieces(self, pool: PoolRef, slot: int,
                    layer: Optional[int] = None) -> List[Tuple[int, int]]:
        """The (address, length) pieces of page slot ``slot`` for one layer
        (None: every layer), in object payload order."""
        pid = self.pool_ref(pool)
        ly = _lib.KVL_ALL_LAYERS if layer is None else \
            c_int(layer, "uint32_t", "page_pieces: layer")
        slot = c_int(slot, "size_t", "page_pieces: slot")
        n = ctypes.c_size_t(0)
        rc = lib.kvl_layout_page_pieces(self._handle, pid, slot, ly,
                                        None, 0, ctypes.byref(n))
        if rc != _lib.KVL_ERANGE or n.value == 0:
            self._check(rc)
        arr = (_lib.kvl_iov * max(n.value, 1))()
        self._check(lib.kvl_layout_page_pieces(self._handle, pid, slot,
                                               ly, arr, n.value,
                                               ctypes.byref(n)))
        return [(arr[i].addr or 0, arr[i].len) for i in range(n.value)]

    @guarded
    def fingerprint(self, pool: Optional[PoolRef] = None) -> str:
        """32 hex characters: the fingerprint of ``pool``, or of the whole
        layout when None."""
        buf = ctypes.create_string_buffer(33)
        pid = -1 if pool is None else self.pool_ref(pool)
        self._check(lib.kvl_layout_fingerprint(self._handle, pid, buf,
                                               len(buf)))
        return buf.value.decode()

    @guarded
    def key(self, pool: PoolRef, page: HashLike,
            shard: Optional[Shard] = None) -> str:
        """The store key of ``page`` in ``pool`` for this layout's shard
        (or another rank ``shard`` of the same sizes): where that rank's
        linker stores that page. A tenant's pages are the hashes of its
        namespace (``hash_pages(tokens, page_size,
        prior=namespace_seed(...))``), so their keys are those hashes'."""
        buf = ctypes.create_string_buffer(_lib.KVL_KEY_MAX)
        page_c = ctypes.byref(kvl_hash.from_buffer_copy(_one_hash(page,
                                                                  "page")))
        if shard is None:
            self._check(lib.kvl_layout_key(self._handle, self.pool_ref(pool),
                                           page_c, buf, len(buf)))
        else:
            if not isinstance(shard, Shard):
                raise TypeError(f"key: shard must be a kvlink.Shard, got "
                                f"{type(shard).__name__}")
            sh = shard._c()
            self._check(lib.kvl_layout_shard_key(
                self._handle, self.pool_ref(pool), ctypes.byref(sh), page_c,
                buf, len(buf)))
        return buf.value.decode()

    # ----------------------------------------------------------- lifetime

    def _free(self) -> None:
        lib.kvl_layout_free(self._h)
        self._h = _lib.LayoutP()
        self._keep.clear()

    def __repr__(self) -> str:
        state = ("closed" if self.closed else
                 "finalized" if self._finalized else "building")
        return (f"<kvlink.Layout {self.model_tag!r} pools="
                f"{self._pool_names} {state}>")


def _writable(info: ArrayInfo, what: str) -> None:
    """Refuses read-only memory for a layout: loads write into it."""
    if info.readonly:
        raise _bad(f"{what} is read-only (loads write into a layout's "
                   f"buffers): pass a writable array")


def _lib_notfound(msg: str):
    from .errors import NotFound
    return NotFound(_lib.KVL_ENOTFOUND, msg)


__all__ = ["Layout", "Shard", "MemKind", "HitPolicy", "PoolInfo", "PoolRef"]
