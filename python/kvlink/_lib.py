# SPDX-License-Identifier: Apache-2.0
"""Loading libkvlink and declaring its C API for ctypes.

Everything here mirrors include/kvlink.h one to one: the record types, the
constants and one prototype per function. Nothing else in the package talks to
ctypes' function table directly; it goes through ``lib`` (the loaded library
with prototypes set) and the names below.

Nothing the library can say is copied by hand: the error table (names, codes,
messages) is read from kvl_err_name / kvl_strerror at import, and the version
from kvl_version. The numeric constants below cannot be asked for at run time;
python/tests/test_header.py checks them, and every prototype, against
include/kvlink.h.

The library is found, in this order:

1. the path in the environment variable ``KVLINK_LIBRARY`` (if set, it must
   load: an explicit choice never falls back silently);
2. ``libkvlink.so`` next to this file (a wheel that bundles the library);
3. ``ctypes.util.find_library("kvlink")`` (an installed library: ``make
   install`` and ``ldconfig``);
4. ``build/libkvlink.so`` of the kvlink source checkout this package lives in
   (``python/kvlink`` → ``build/``), for running the examples from a checkout.

If none loads, importing kvlink raises ImportError listing every place tried.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int,
                    c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)
from typing import List, NamedTuple, Tuple

# ------------------------------------------------------------------ constants

# #defines and enum members of kvlink.h (python/tests/test_header.py compares
# them with the header). The error codes are not here: see ERROR_TABLE below.
KVL_OK = 0
KVL_HASH_BYTES = 32
KVL_HASH_HEX_LEN = 64
KVL_LAYOUT_ALIGN = 8
KVL_NAME_MAX = 64
KVL_KEY_MAX = 320
KVL_ALL_LAYERS = 0xFFFFFFFF
KVL_MAX_LAYER = 1048575
KVL_NO_SLOT = ctypes.c_size_t(-1).value  # SIZE_MAX
KVL_POOL_REPLICATED_TP = 0x1
KVL_PUT_STORED = 0
KVL_PUT_PRESENT = 1
KVL_LINKER_MAX_BATCHES = 64
KVL_LINKER_MAX_REQUESTS = 1048576
KVL_LINKER_MAX_REQUEST_PAGES = 16777216
KVL_LINKER_MAX_IO_BATCH = 65536
KVL_LINKER_MAX_GPU_STAGING = 1 << 30
UINT32_MAX = 0xFFFFFFFF

KVL_MEM_HOST = 0
KVL_MEM_CUDA = 1
KVL_HIT_ALL_PAGES = 0
KVL_HIT_TRAILING_PAGES = 1
KVL_REQ_LOAD = 1
KVL_REQ_OFFLOAD = 2
KVL_STATS_PROMETHEUS = 0
KVL_STATS_JSON = 1
KVL_LOG_OFF = -1
KVL_LOG_ERROR = 0
KVL_LOG_WARNING = 1
KVL_LOG_INFO = 2
KVL_LOG_DEBUG = 3
KVL_GPU_COPY_AUTO = 0
KVL_GPU_COPY_KERNEL = 1
KVL_GPU_COPY_DMA = 2

# -------------------------------------------------------------------- records


class kvl_hash(Structure):
    _fields_ = [("bytes", c_uint8 * KVL_HASH_BYTES)]


class kvl_shard(Structure):
    _fields_ = [("tp_rank", c_uint32), ("tp_size", c_uint32),
                ("cp_rank", c_uint32), ("cp_size", c_uint32),
                ("pp_rank", c_uint32), ("pp_size", c_uint32)]


class kvl_buffer(Structure):
    _fields_ = [("base", c_void_p), ("page_stride", c_size_t),
                ("page_bytes", c_size_t), ("num_pages", c_size_t),
                ("mem", c_int), ("device", c_int)]


class kvl_iov(Structure):
    _fields_ = [("addr", c_void_p), ("len", c_size_t)]


class kvl_range(Structure):
    _fields_ = [("offset", c_uint64), ("addr", c_void_p), ("len", c_size_t)]


class kvl_policy(Structure):
    _fields_ = [("kind", c_int), ("window", c_uint32)]


class kvl_store_stats(Structure):
    _fields_ = [(name, c_uint64) for name in
                ("objects", "bytes", "capacity", "hits", "misses", "puts",
                 "evictions", "errors", "breaker_opens", "breaker_refused",
                 "breaker_open")]


kvl_allreduce_fn = CFUNCTYPE(c_int, POINTER(c_uint64), c_size_t, c_void_p)
kvl_log_fn = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_char_p)


class kvl_linker_opts(Structure):
    _fields_ = [("struct_size", c_uint32),
                ("allreduce", kvl_allreduce_fn),
                ("allreduce_user", c_void_p),
                ("max_requests", c_uint32),
                ("max_request_pages", c_uint32),
                ("io_batch", c_uint32),
                ("gpu_copy", c_uint32),
                ("gpu_staging", c_uint32)]


class kvl_completion(Structure):
    _fields_ = [("id", c_uint64), ("kind", c_int), ("status", c_int),
                ("valid_pages", c_size_t), ("n_pages", c_size_t)]


# Opaque handles: distinct pointer types so that a layout is never passed
# where a store is expected.
class _Opaque(Structure):
    pass


class kvl_layout(_Opaque):
    pass


class kvl_store(_Opaque):
    pass


class kvl_linker(_Opaque):
    pass


class kvl_rank_group(_Opaque):
    pass


class kvl_prober(_Opaque):
    pass


LayoutP = POINTER(kvl_layout)
StoreP = POINTER(kvl_store)
LinkerP = POINTER(kvl_linker)
RankGroupP = POINTER(kvl_rank_group)
ProberP = POINTER(kvl_prober)
HashP = POINTER(kvl_hash)
SizeTPP = POINTER(POINTER(c_size_t))
c_int_p = POINTER(c_int)
c_size_t_p = POINTER(c_size_t)

# ----------------------------------------------------------------- prototypes

# name: (restype, argtypes), in the order of kvlink.h. Every function of the
# bound version is required: a library that lacks one is refused at import.
_PROTOTYPES = {
    # errors, version, features
    "kvl_strerror": (c_char_p, [c_int]),
    "kvl_err_name": (c_char_p, [c_int]),
    "kvl_version": (c_char_p, []),
    "kvl_has_feature": (c_int, [c_char_p]),
    # linker
    "kvl_linker_open": (c_int, [StoreP, LayoutP, POINTER(kvl_linker_opts),
                                POINTER(LinkerP), c_char_p, c_size_t]),
    "kvl_linker_shutdown": (None, [LinkerP]),
    "kvl_linker_close": (None, [LinkerP]),
    "kvl_linker_errmsg": (c_char_p, [LinkerP]),
    "kvl_linker_lookup": (c_int, [LinkerP, HashP, c_size_t,
                                  POINTER(POINTER(c_uint8)), c_size_t_p]),
    "kvl_linker_lookup_set": (c_int, [LinkerP, HashP, c_size_t,
                                      POINTER(POINTER(c_uint8)),
                                      POINTER(c_uint64), c_size_t]),
    "kvl_linker_load": (c_int, [LinkerP, c_uint64, HashP, c_size_t,
                                SizeTPP]),
    "kvl_linker_cancel": (c_int, [LinkerP, c_uint64, c_int_p]),
    "kvl_linker_start": (c_int, [LinkerP, POINTER(c_uint64)]),
    "kvl_linker_start_after": (c_int, [LinkerP, c_void_p, POINTER(c_uint64)]),
    "kvl_linker_layers": (c_uint32, [LinkerP]),
    "kvl_linker_wait": (c_int, [LinkerP, c_uint64, c_uint32, c_uint32]),
    "kvl_linker_wait_stream": (c_int, [LinkerP, c_uint64, c_uint32, c_void_p,
                                       c_uint32]),
    "kvl_linker_offload": (c_int, [LinkerP, c_uint64, HashP, c_size_t,
                                   SizeTPP, c_void_p]),
    "kvl_linker_flush": (c_int, [LinkerP, c_uint32]),
    "kvl_linker_poll": (c_int, [LinkerP, POINTER(kvl_completion), c_size_t,
                                c_size_t_p, c_uint32]),
    # hashes
    "kvl_hash_pages": (c_int, [POINTER(c_uint64), c_size_t, c_size_t, HashP,
                               HashP, c_size_t, c_size_t_p]),
    "kvl_hash_bigram_pages": (c_int, [POINTER(c_uint64), c_size_t, c_size_t,
                                      HashP, HashP, c_size_t, c_size_t_p]),
    "kvl_namespace_seed": (c_int, [POINTER(c_char_p), c_size_t, HashP]),
    "kvl_sglang_namespace_seed": (c_int, [c_char_p, c_char_p, HashP,
                                          c_int_p]),
    "kvl_hash_to_hex": (c_int, [HashP, c_char_p, c_size_t]),
    "kvl_hash_from_hex": (c_int, [c_char_p, HashP]),
    # layouts
    "kvl_layout_create": (c_int, [c_char_p, c_uint32, POINTER(kvl_shard),
                                  POINTER(LayoutP), c_char_p, c_size_t]),
    "kvl_layout_add_pool": (c_int, [LayoutP, c_char_p, c_int, c_uint32,
                                    c_uint32, c_int_p]),
    "kvl_layout_pool_format": (c_int, [LayoutP, c_int, c_char_p, c_char_p]),
    "kvl_layout_add_shape": (c_int, [LayoutP, c_int, c_char_p, c_uint32,
                                     c_size_t]),
    "kvl_layout_shard_key": (c_int, [LayoutP, c_int, POINTER(kvl_shard),
                                     HashP, c_char_p, c_size_t]),
    "kvl_prober_open": (c_int, [StoreP, POINTER(LayoutP), c_size_t,
                                POINTER(ProberP), c_char_p, c_size_t]),
    "kvl_prober_lookup_set": (c_int, [ProberP, HashP, c_size_t,
                                      POINTER(c_uint64), c_size_t]),
    "kvl_prober_lookup": (c_int, [ProberP, HashP, c_size_t, c_size_t_p]),
    "kvl_prober_errmsg": (c_char_p, [ProberP]),
    "kvl_prober_close": (None, [ProberP]),
    "kvl_layout_add_buffer": (c_int, [LayoutP, c_int, c_char_p, c_uint32,
                                      POINTER(kvl_buffer)]),
    "kvl_layout_finalize": (c_int, [LayoutP]),
    "kvl_layout_free": (None, [LayoutP]),
    "kvl_layout_errmsg": (c_char_p, [LayoutP]),
    "kvl_layout_pool_count": (c_int, [LayoutP, c_int_p]),
    "kvl_layout_pool_id": (c_int, [LayoutP, c_char_p, c_int_p]),
    "kvl_layout_pool_info": (c_int, [LayoutP, c_int, POINTER(c_char_p),
                                     c_int_p, POINTER(c_uint32),
                                     POINTER(c_uint32)]),
    "kvl_layout_page_size": (c_uint32, [LayoutP]),
    "kvl_layout_shard": (kvl_shard, [LayoutP]),
    "kvl_layout_pool_layers": (c_int, [LayoutP, c_int, POINTER(c_uint32),
                                       c_size_t, c_size_t_p]),
    "kvl_layout_pool_pages": (c_int, [LayoutP, c_int, c_size_t_p]),
    # stores
    "kvl_store_open": (c_int, [c_char_p, POINTER(StoreP), c_char_p,
                               c_size_t]),
    "kvl_uri_redact": (c_int, [c_char_p, c_char_p, c_size_t]),
    "kvl_mem_policy_name": (c_char_p, [c_size_t]),
    "kvl_parse_size": (c_int, [c_char_p, POINTER(c_uint64)]),
    "kvl_store_close": (None, [StoreP]),
    "kvl_store_errmsg": (c_char_p, [StoreP]),
    "kvl_store_register": (c_int, [StoreP, c_void_p, c_size_t, c_int]),
    "kvl_store_stats_get": (c_int, [StoreP, POINTER(kvl_store_stats)]),
    # stats
    "kvl_linker_stats_render": (c_int, [LinkerP, c_int, c_char_p, c_size_t,
                                        c_size_t_p]),
    "kvl_store_stats_render": (c_int, [StoreP, c_int, c_char_p, c_size_t,
                                       c_size_t_p]),
    # logging
    "kvl_log_set": (c_int, [kvl_log_fn, c_void_p, c_int]),
    "kvl_log_get_level": (c_int, []),
    # advanced: store batch calls
    "kvl_store_exists": (c_int, [StoreP, POINTER(c_char_p), c_size_t,
                                 c_int_p]),
    "kvl_store_get": (c_int, [StoreP, POINTER(c_char_p), c_size_t,
                              POINTER(kvl_range), c_size_t_p, c_int_p]),
    "kvl_store_put": (c_int, [StoreP, POINTER(c_char_p), c_size_t,
                              POINTER(kvl_iov), c_size_t_p, c_int_p]),
    "kvl_store_remove": (c_int, [StoreP, POINTER(c_char_p), c_size_t,
                                 c_int_p]),
    # advanced: page I/O
    "kvl_pages_exists": (c_int, [StoreP, LayoutP, c_int, HashP, c_size_t,
                                 c_int_p]),
    "kvl_pages_put": (c_int, [StoreP, LayoutP, c_int, HashP, c_size_t_p,
                              c_size_t, c_int_p]),
    "kvl_pages_get": (c_int, [StoreP, LayoutP, c_int, HashP, c_size_t_p,
                              c_size_t, c_uint32, c_int_p]),
    # advanced: object format
    "kvl_layout_object_size": (c_int, [LayoutP, c_int, c_size_t_p,
                                       c_size_t_p]),
    "kvl_layout_layer_range": (c_int, [LayoutP, c_int, c_uint32, c_size_t_p,
                                       c_size_t_p]),
    "kvl_layout_page_pieces": (c_int, [LayoutP, c_int, c_size_t, c_uint32,
                                       POINTER(kvl_iov), c_size_t,
                                       c_size_t_p]),
    "kvl_layout_fingerprint": (c_int, [LayoutP, c_int, c_char_p, c_size_t]),
    "kvl_layout_key": (c_int, [LayoutP, c_int, HashP, c_char_p, c_size_t]),
    # advanced: restorable sets and ranks
    "kvl_restorable_set": (c_int, [POINTER(kvl_policy),
                                   POINTER(POINTER(c_uint8)), c_size_t,
                                   c_size_t, POINTER(c_uint64), c_size_t]),
    "kvl_bitmap_max": (c_size_t, [POINTER(c_uint64), c_size_t]),
    "kvl_rank_group_create": (c_int, [ctypes.c_uint, ctypes.c_uint,
                                      POINTER(RankGroupP)]),
    "kvl_rank_group_allreduce": (c_int, [POINTER(c_uint64), c_size_t,
                                         c_void_p]),
    "kvl_rank_group_free": (None, [RankGroupP]),
}

# The library major.minor these bindings were written against. Before 1.0 a
# minor version may change the API (0.2 and 0.3 did), so a 0.x library must match
# major and minor; from 1.0 on, any later minor of the same major does.
BOUND_VERSION = (0, 6)

LIBRARY_ENV = "KVL_LIBRARY"
LIBRARY_ENV_OLD = "KVLINK_LIBRARY"  # its name before 0.5, still read


def _candidates():
    """(where, path) pairs in lookup order, and the env value if set."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name in (LIBRARY_ENV, LIBRARY_ENV_OLD):
        env = os.environ.get(name)
        if env:
            return [(f"${name}", env)], env
    out = []
    for name in ("libkvlink.so", "libkvlink.so.%d.%d" % BOUND_VERSION):
        out.append(("next to the package", os.path.join(here, name)))
    found = ctypes.util.find_library("kvlink")
    out.append(('ctypes.util.find_library("kvlink")', found))
    top = os.path.normpath(os.path.join(here, "..", ".."))
    if os.path.isfile(os.path.join(top, "include", "kvlink.h")):
        out.append(("the source checkout's build directory",
                    os.path.join(top, "build", "libkvlink.so")))
    return out, None


def _load():
    tried = []
    candidates, env = _candidates()
    for where, path in candidates:
        if path is None:
            tried.append(f"  {where}: nothing found")
            continue
        if os.sep in path and not os.path.exists(path):
            tried.append(f"  {where}: {path}: no such file")
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"  {where}: {path}: {e}")
            continue
        return handle, path
    hint = (f"{candidates[0][0][1:]} is set but does not load; fix or "
            f"unset it" if env else
            f"build kvlink (make, or cmake --build build) and set "
            f"{LIBRARY_ENV}=/path/to/libkvlink.so, or install it "
            f"(make install; ldconfig)")
    raise ImportError("kvlink: cannot load libkvlink.so; tried:\n" +
                      "\n".join(tried) + "\n" + hint)


def check_version(version: str, path: str = "the library") -> None:
    """Raises ImportError unless library version ``version`` ("MAJOR.MINOR.
    PATCH") is one these bindings can use (see BOUND_VERSION)."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        raise ImportError(f"kvlink: {path} reports version {version!r}") \
            from None
    want_major, want_minor = BOUND_VERSION
    if want_major == 0:
        ok = (major, minor) == BOUND_VERSION
        need = f"{want_major}.{want_minor}.x"
    else:
        ok = major == want_major and minor >= want_minor
        need = f"{want_major}.{want_minor} or a later {want_major}.x"
    if not ok:
        raise ImportError(f"kvlink: {path} is version {version}; these "
                          f"bindings need {need}")


def _declare(handle, path):
    # The version first, with only kvl_version declared: a library of
    # another version may lack (or have changed) the other functions.
    try:
        fn = handle.kvl_version
    except AttributeError:
        raise ImportError(f"kvlink: {path} lacks kvl_version: it is not a "
                          f"kvlink library") from None
    fn.restype, fn.argtypes = _PROTOTYPES["kvl_version"]
    version = fn().decode()
    check_version(version, path)
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(handle, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(f"kvlink: {path} (version {version}) lacks "
                          f"{', '.join(missing)}")
    return version


class ErrorCode(NamedTuple):
    """One row of the library's error table."""
    name: str     #: e.g. "KVL_EINVAL"
    code: int     #: e.g. -1
    message: str  #: kvl_strerror's description


# The codes the binding itself names (its exception classes, its own
# checks); the library's table must have them all.
_NAMED_CODES = ("KVL_EINVAL", "KVL_ENOMEM", "KVL_ENOTFOUND", "KVL_ERANGE",
                "KVL_EEXIST", "KVL_EIO", "KVL_ECORRUPT", "KVL_ETIMEDOUT",
                "KVL_ECANCELED", "KVL_EFULL", "KVL_ECLOSED", "KVL_ENOTSUP",
                "KVL_EPARSE", "KVL_ESTATE")


def _error_table(handle, path) -> Tuple[ErrorCode, ...]:
    """The library's error codes: -1, -2, … until kvl_err_name says
    "KVL_EUNKNOWN" (kvlink.h: the codes have no gaps)."""
    table: List[ErrorCode] = []
    code = -1
    while True:
        name = handle.kvl_err_name(code).decode()
        if name == "KVL_EUNKNOWN":
            break
        if len(table) >= 4096:
            raise ImportError(f"kvlink: {path}: kvl_err_name never says "
                              f"KVL_EUNKNOWN")
        table.append(ErrorCode(name, code,
                               handle.kvl_strerror(code).decode()))
        code -= 1
    missing = [n for n in _NAMED_CODES if n not in {e.name for e in table}]
    if missing:
        raise ImportError(f"kvlink: {path} has no error code "
                          f"{', '.join(missing)}")
    return tuple(table)


lib, path = _load()
version = _declare(lib, path)

#: Every error code of the loaded library, -1 first.
ERROR_TABLE = _error_table(lib, path)
#: Error codes by name, e.g. ``ERRNO["KVL_EINVAL"] == -1``.
ERRNO = {e.name: e.code for e in ERROR_TABLE}
globals().update(ERRNO)  # KVL_EINVAL, … as module constants
# The same, declared for type checkers (the values are the library's).
KVL_EINVAL: int
KVL_ENOMEM: int
KVL_ENOTFOUND: int
KVL_ERANGE: int
KVL_EEXIST: int
KVL_EIO: int
KVL_ECORRUPT: int
KVL_ETIMEDOUT: int
KVL_ECANCELED: int
KVL_EFULL: int
KVL_ECLOSED: int
KVL_ENOTSUP: int
KVL_EPARSE: int
KVL_ESTATE: int


def strerror(code: int) -> str:
    return lib.kvl_strerror(code).decode()


def err_name(code: int) -> str:
    return lib.kvl_err_name(code).decode()


def size_t_array(values):
    """A ctypes size_t array from an iterable of ints (no mapping)."""
    values = list(values)
    return (c_size_t * len(values))(*values)


__all__ = [n for n in dir() if n.startswith(("kvl_", "KVL_"))]
