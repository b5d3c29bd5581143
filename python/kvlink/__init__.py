# SPDX-License-Identifier: Apache-2.0
"""kvlink: keep an inference engine's KV-cache pages outside GPU memory.

Python bindings (ctypes) over libkvlink's C API (include/kvlink.h):

- :func:`hash_pages`, :func:`namespace_seed` — 32-byte chained page hashes,
  in a tenant's namespace with ``prior=namespace_seed(...)``;
- :class:`Layout` — the engine's page pools (numpy arrays, torch tensors or
  raw addresses), with :meth:`Layout.add_kv_cache` for a whole paged pool;
- :class:`Store` — where objects live, opened by URI (``"mem:"``, …), with
  :func:`parse_size` and :func:`mem_policy_names` for its options,
  :func:`redact_uri` to show a URI without its password;
- :class:`Linker` — lookup, layer-wise load/start/wait (CPU or CUDA stream),
  offload (after a CUDA event too), flush, poll, stats;
- :class:`Prober` — which prefixes every rank can restore, from the store
  alone (a scheduler, router or proxy without the ranks' buffers);
- :class:`KvlinkError` and its subclasses — every failure, with kvlink's
  message.

The shared library is found through ``$KVLINK_LIBRARY``, then next to this
package, then ``ctypes.util.find_library("kvlink")``, then the build/
directory of the source checkout this package is in.
"""

from __future__ import annotations

from . import _lib
from .errors import (AlreadyExists, ArgumentOutOfRange, Canceled, Closed,
                     Corrupt, Full,
                     InvalidArgument, KvlinkError, NotFound, NotSupported,
                     OutOfMemory, OutOfRange, ParseError, PermissionDenied,
                     StateError,
                     StoreIOError, Timeout, error_class)
from .hashes import hash_from_hex, hash_hex, hash_pages, namespace_seed, \
    sglang_namespace_seed
from .layout import HitPolicy, Layout, MemKind, PoolInfo, Shard
from .linker import (NO_SLOT, Completion, GpuCopy, Linker, RankGroup,
                     RequestKind)
from .prober import Prober
from . import log  # the library's messages go to logging's "kvlink"
from .store import Store, mem_policy_names, parse_size, redact_uri

#: The loaded library's version (kvl_version()), "MAJOR.MINOR.PATCH".
__version__: str = _lib.version

#: Path of the loaded libkvlink.
library_path: str = _lib.path

HASH_BYTES = _lib.KVL_HASH_BYTES

#: Error codes by name, e.g. ``ERRORS["KVL_EINVAL"] == -1``, as the loaded
#: library reports them (kvl_err_name).
ERRORS = dict(_lib.ERRNO)

#: The library's error table: (name, code, message) for each code, -1 first.
ERROR_TABLE = _lib.ERROR_TABLE


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH" (= __version__)."""
    return _lib.version


def has_feature(name: str) -> bool:
    """True if the loaded library has optional feature ``name``: ``"cuda"``
    (GPU copies, stream waits), ``"redis"`` (the redis:// store) or
    ``"tls"`` (rediss://, the Redis store over TLS)."""
    return bool(_lib.lib.kvl_has_feature(name.encode()))


def strerror(code: int) -> str:
    """kvlink's English description of error ``code``."""
    return _lib.strerror(code)


def err_name(code: int) -> str:
    """The symbolic name of ``code``, e.g. ``"KVL_EINVAL"``."""
    return _lib.err_name(code)


__all__ = [
    "version", "has_feature", "strerror", "err_name", "library_path",
    "hash_pages", "namespace_seed", "sglang_namespace_seed", "hash_hex",
    "hash_from_hex",
    "Layout", "Shard", "MemKind", "HitPolicy", "PoolInfo",
    "Store", "parse_size", "mem_policy_names", "redact_uri",
    "Linker", "GpuCopy", "Completion", "RequestKind", "RankGroup", "NO_SLOT", "Prober",
    "KvlinkError", "InvalidArgument", "OutOfMemory", "NotFound", "OutOfRange",
    "AlreadyExists", "StoreIOError", "Corrupt", "Timeout", "Canceled", "Full",
    "Closed", "NotSupported", "ParseError", "PermissionDenied", "StateError",
    "ArgumentOutOfRange",
    "error_class", "log",
    "ERRORS", "ERROR_TABLE", "HASH_BYTES",
]
