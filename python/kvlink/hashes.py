# SPDX-License-Identifier: Apache-2.0
"""Page hashes and namespace seeds.

A page hash is 32 bytes: ``h_i = SHA-256(h_{i-1} ‖ tokens_i as u32 LE)``, with
``h_{-1}`` the optional prior (a namespace seed). Pages are named by their
hashes only, so tenants (cache salts, LoRA adapters) that must not share pages
hash them in different namespaces:
``hash_pages(tokens, page_size, prior=namespace_seed("tenant-a"))``. In Python
a hash is a
``bytes`` object of length 32; functions that take many hashes accept a list
of them, one ``bytes`` of 32·n bytes, or a numpy ``uint8`` array shaped
``(n, 32)`` (what ``hash_pages(..., as_array=True)`` returns).
"""

from __future__ import annotations

import array
import ctypes
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._lib import KVL_HASH_BYTES, kvl_hash, lib
from .errors import InvalidArgument, check

try:  # numpy is optional for the binding itself
    import numpy as _np
except ImportError:  # pragma: no cover - exercised only without numpy
    _np = None  # type: ignore[assignment]

HashLike = Union[bytes, bytearray, memoryview, str]
"""One page hash: 32 bytes, or its 64 hex characters."""

HashesLike = Any
"""Many page hashes: a sequence of HashLike, bytes of 32·n bytes, or a numpy
uint8 array shaped (n, 32)."""


def _one_hash(h: HashLike, what: str = "hash") -> bytes:
    if isinstance(h, str):
        return hash_from_hex(h)
    if isinstance(h, (bytes, bytearray, memoryview)):
        b = bytes(h)
    elif _np is not None and isinstance(h, _np.ndarray):
        b = _np.ascontiguousarray(h, dtype=_np.uint8).tobytes()
    else:
        raise TypeError(f"{what}: expected 32 bytes or 64 hex characters, "
                        f"got {type(h).__name__}")
    if len(b) != KVL_HASH_BYTES:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              f"{what}: a page hash is {KVL_HASH_BYTES} "
                              f"bytes, got {len(b)}")
    return b


def hash_ptr(h: Optional[HashLike], what: str = "hash"):
    """A kvl_hash (or None) for a C call's optional single-hash argument."""
    if h is None:
        return None
    return ctypes.pointer(kvl_hash.from_buffer_copy(_one_hash(h, what)))


def hash_array(pages: HashesLike, what: str = "pages") -> Tuple[Any, int]:
    """(ctypes kvl_hash array or None, n) from many hashes (copied)."""
    if pages is None:
        return None, 0
    if isinstance(pages, (bytes, bytearray, memoryview)):
        data = bytes(pages)
    elif _np is not None and isinstance(pages, _np.ndarray):
        a = _np.ascontiguousarray(pages)
        if a.dtype != _np.uint8 or (a.ndim == 2 and a.shape[1] != 32) or \
                a.ndim > 2:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"{what}: expected a uint8 array shaped "
                                  f"(n, 32), got {a.dtype} {a.shape}")
        data = a.tobytes()
    elif isinstance(pages, str):
        raise TypeError(f"{what}: expected a list of page hashes, got one "
                        f"string")
    else:
        data = b"".join(_one_hash(h, f"{what}[{i}]")
                        for i, h in enumerate(pages))
    if len(data) % KVL_HASH_BYTES:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              f"{what}: {len(data)} bytes is not a whole "
                              f"number of {KVL_HASH_BYTES}-byte hashes")
    n = len(data) // KVL_HASH_BYTES
    if n == 0:
        return None, 0
    return (kvl_hash * n).from_buffer_copy(data), n


def _tokens_u64(tokens: Any):
    """A ctypes uint64 array (and its length) from token ids."""
    if _np is not None and not isinstance(tokens, (list, tuple, array.array)):
        if hasattr(tokens, "detach") and hasattr(tokens, "cpu"):  # torch
            tokens = tokens.detach().cpu().numpy()
        a = _np.asarray(tokens)
        if a.ndim != 1:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"tokens: expected one dimension, got "
                                  f"shape {a.shape}")
        if a.size and a.dtype.kind not in "iu":
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"tokens: expected integers, got {a.dtype}")
        if a.dtype.kind == "i" and a.size and a.min() < 0:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  "tokens: token ids must not be negative")
        a = _np.ascontiguousarray(a, dtype=_np.uint64)
        n = a.shape[0]
        ptr = a.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64))
        return (ptr if n else None), n, a
    if hasattr(tokens, "tolist") and not isinstance(tokens, list):
        tokens = tokens.tolist()
    try:
        q = array.array("Q", tokens)
    except OverflowError:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              "tokens: token ids must be in 0..2^64-1")
    except TypeError as e:
        raise TypeError(f"tokens: expected integers ({e})") from None
    n = len(q)
    return (ctypes.c_uint64 * n).from_buffer(q) if n else None, n, q


def hash_pages(tokens: Union[Sequence[int], Any], page_size: int,
               prior: Optional[HashLike] = None, *,
               as_array: bool = False,
               bigram: bool = False) -> Union[List[bytes], Any]:
    """Hashes every whole page of ``tokens`` (trailing tokens that do not fill
    a page are ignored): SGLang's page hashes, byte for byte.

    Args:
        tokens: token ids: a list of ints, an ``array.array``, a numpy array
            or a 1-D torch tensor (ids ≥ 0).
        page_size: tokens per page, > 0.
        prior: optional hash preceding page 0: a :func:`namespace_seed`
            puts the pages in that namespace (pages of different priors
            never share a hash, so tenants never share pages).
        as_array: return a numpy ``uint8`` array shaped ``(pages, 32)``
            instead of a list of ``bytes``.
        bigram: hash SGLang's EAGLE bigram keys instead: the n - 1
            overlapping pairs of n tokens, ``page_size`` pairs to a page
            (``(n - 1) // page_size`` pages). A tail from token
            ``d * page_size`` on, with page d - 1's hash as ``prior``,
            continues the chain.

    Returns:
        One 32-byte hash per whole page, in order.

    Raises:
        InvalidArgument: page_size ≤ 0 (ArgumentOutOfRange), negative or
            non-integer tokens.
        TypeError: a page_size that is not an integer.
    """
    from ._args import c_int
    page_size = c_int(page_size, "size_t", "hash_pages: page_size", lo=1)
    ptr, n_tokens, keep = _tokens_u64(tokens)
    if bigram:
        n_pages = (n_tokens - 1) // page_size if n_tokens > 1 else 0
        fn = lib.kvl_hash_bigram_pages
    else:
        n_pages = n_tokens // page_size
        fn = lib.kvl_hash_pages
    out = (kvl_hash * max(n_pages, 1))()
    n_out = ctypes.c_size_t(0)
    check(fn(ptr, n_tokens, page_size, hash_ptr(prior, "prior"), out,
             n_pages, ctypes.byref(n_out)),
          context="hash_pages")
    del keep
    raw = bytes(out)[:n_out.value * KVL_HASH_BYTES]
    if as_array:
        if _np is None:
            raise ImportError("hash_pages(as_array=True) needs numpy")
        return _np.frombuffer(raw, dtype=_np.uint8).reshape(n_out.value,
                                                            KVL_HASH_BYTES)
    return [raw[i:i + KVL_HASH_BYTES]
            for i in range(0, len(raw), KVL_HASH_BYTES)]


def namespace_seed(*salts: Union[str, bytes]) -> bytes:
    """The 32-byte namespace seed of one or more salts (tenant id, cache
    salt, …), to pass as ``prior`` of :func:`hash_pages`: the pages hashed
    with it are that namespace's, and the linker, which names pages by hash
    only, never gives them to another namespace. Order matters.

    Raises:
        InvalidArgument: no salt, or a salt holding a NUL character.
    """
    if len(salts) == 1 and isinstance(salts[0], (list, tuple)):
        salts = tuple(salts[0])
    if not salts:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              "namespace_seed: at least one salt is needed")
    enc = []
    for i, s in enumerate(salts):
        b = s.encode() if isinstance(s, str) else bytes(s)
        if b"\0" in b:
            raise InvalidArgument(_lib.KVL_EINVAL,
                                  f"namespace_seed: salt {i} holds a NUL "
                                  f"character")
        enc.append(b)
    arr = (ctypes.c_char_p * len(enc))(*enc)
    out = kvl_hash()
    check(lib.kvl_namespace_seed(arr, len(enc), ctypes.byref(out)),
          context="namespace_seed")
    return bytes(out)


def sglang_namespace_seed(extra_key: Optional[str] = None,
                          cache_salt: Optional[str] = None
                          ) -> Optional[bytes]:
    """SGLang's storage namespace seed of a request (its ``extra_key``, with
    a LoRA adapter's id appended, and its ``cache_salt``): pass it as
    ``prior`` of :func:`hash_pages` for page 0 and kvlink names the pages
    exactly as SGLang does. None when both are None: SGLang then hashes
    the bare chain (prior None). An absent part differs from an empty one.

    Raises:
        InvalidArgument: a part holding a NUL character. TypeError: a part
            that is not a str.
    """
    from ._args import c_text
    parts = [None if p is None else
             c_text(p, f"sglang_namespace_seed: {what}")
             for p, what in ((extra_key, "extra_key"),
                             (cache_salt, "cache_salt"))]
    out = kvl_hash()
    seeded = ctypes.c_int(0)
    check(lib.kvl_sglang_namespace_seed(parts[0], parts[1],
                                        ctypes.byref(out),
                                        ctypes.byref(seeded)),
          context="sglang_namespace_seed")
    return bytes(out) if seeded.value else None


def hash_hex(h: HashLike) -> str:
    """The 64 lowercase hex characters of a page hash."""
    buf = ctypes.create_string_buffer(_lib.KVL_HASH_HEX_LEN + 1)
    check(lib.kvl_hash_to_hex(ctypes.byref(kvl_hash.from_buffer_copy(
        _one_hash(h))), buf, len(buf)), context="hash_hex")
    return buf.value.decode()


def hash_from_hex(text: str) -> bytes:
    """Parses 64 hex characters (either case) into a 32-byte hash.

    Raises:
        ParseError: wrong length or a non-hex character.
    """
    out = kvl_hash()
    check(lib.kvl_hash_from_hex(text.encode(), ctypes.byref(out)),
          context=f"hash_from_hex({text!r})")
    return bytes(out)


__all__ = ["hash_pages", "namespace_seed", "sglang_namespace_seed",
           "hash_hex", "hash_from_hex",
           "HashLike", "HashesLike"]
