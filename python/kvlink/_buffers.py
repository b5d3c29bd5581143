# SPDX-License-Identifier: Apache-2.0
"""Addresses, shapes and devices of arrays, tensors and Python buffers.

kvlink's C API takes raw addresses. This module finds them, without importing
torch or numpy itself, for:

- torch tensors (``data_ptr()``, ``stride()``, ``element_size()``, ``device``),
- objects with ``__cuda_array_interface__`` (CuPy, Numba, …),
- numpy arrays and anything with ``__array_interface__``,
- Python buffers (``bytes``, ``bytearray``, ``memoryview``, ``array.array``).

The caller keeps the returned ``keep`` object alive for as long as the address
is in use.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, NamedTuple, Optional, Tuple

from . import _lib
from .errors import InvalidArgument


class ArrayInfo(NamedTuple):
    """Where an array's elements are and how they are laid out."""
    ptr: int                  #: address of element [0, 0, …]
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  #: in bytes
    itemsize: int             #: bytes per element
    mem: int                  #: KVL_MEM_HOST or KVL_MEM_CUDA
    device: int               #: CUDA device ordinal (0 for host memory)
    keep: Any                 #: the object that owns the memory
    readonly: bool = False    #: the memory must not be written


def _bad(msg: str) -> InvalidArgument:
    return InvalidArgument(_lib.KVL_EINVAL, msg)


def dtype_name(dtype: Any) -> str:
    """A dtype's name for kvl_layout_pool_format: a str as given; a torch
    dtype without its "torch." (``torch.bfloat16`` → "bfloat16"); a numpy
    dtype (or anything ``numpy.dtype`` takes) by its name."""
    if isinstance(dtype, str):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(dtype, type) and hasattr(dtype, "__name__"):
        return dtype.__name__  # numpy scalar types: numpy.float16
    raise TypeError(f"dtype: expected a str, numpy or torch dtype, got "
                    f"{type(dtype).__name__} {dtype!r}")


def is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _c_strides(shape, itemsize):
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _itemsize(typestr: str) -> int:
    try:
        return int(typestr[2:])
    except ValueError:
        raise _bad(f"unsupported array typestr {typestr!r}") from None


def array_info(obj: Any, what: str = "array") -> ArrayInfo:
    """Describes ``obj``'s memory. Raises InvalidArgument for objects that
    are not arrays, or memory that is neither host nor CUDA."""
    if is_torch_tensor(obj):
        itemsize = obj.element_size()
        dev = obj.device
        if dev.type == "cuda":
            mem = _lib.KVL_MEM_CUDA
            index = dev.index
            if index is None:  # pragma: no cover - tensors carry an index
                index = sys.modules["torch"].cuda.current_device()
        elif dev.type == "cpu":
            mem, index = _lib.KVL_MEM_HOST, 0
        else:
            raise _bad(f"{what}: tensors on {dev.type} devices are not "
                       f"supported (host or CUDA only)")
        return ArrayInfo(obj.data_ptr(), tuple(obj.shape),
                         tuple(s * itemsize for s in obj.stride()),
                         itemsize, mem, index, obj, False)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        itemsize = _itemsize(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = cai.get("strides") or _c_strides(shape, itemsize)
        device = 0
        dev = getattr(obj, "device", None)
        if dev is not None and hasattr(dev, "id"):
            device = int(dev.id)
        return ArrayInfo(int(cai["data"][0]), shape, tuple(strides), itemsize,
                         _lib.KVL_MEM_CUDA, device, obj,
                         bool(cai["data"][1]))
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        itemsize = _itemsize(ai["typestr"])
        shape = tuple(ai["shape"])
        strides = ai.get("strides") or _c_strides(shape, itemsize)
        return ArrayInfo(int(ai["data"][0]), shape, tuple(strides), itemsize,
                         _lib.KVL_MEM_HOST, 0, obj, bool(ai["data"][1]))
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what}: expected a numpy array, a torch tensor or "
                        f"a buffer, got {type(obj).__name__}") from None
    if mv.readonly:  # callers that write refuse it by the flag
        addr, n, keep = buffer_ptr(mv, writable=False, what=what)
        return ArrayInfo(addr, (n,), (1,), 1, _lib.KVL_MEM_HOST, 0, keep,
                         True)
    addr, n, keep = buffer_ptr(mv, writable=True, what=what)
    return ArrayInfo(addr, (n,), (1,), 1, _lib.KVL_MEM_HOST, 0, keep)


def buffer_ptr(obj: Any, writable: bool, what: str = "buffer"
               ) -> Tuple[int, int, Any]:
    """(address, byte length, keepalive) of a contiguous host buffer.

    ``writable``: the memory will be written (a read-only buffer is then an
    error); otherwise a read-only buffer that is not ``bytes`` may be
    copied."""
    if isinstance(obj, bytes):
        if writable:
            raise _bad(f"{what}: bytes objects are read-only; use a "
                       f"bytearray or an array")
        p = ctypes.c_char_p(obj)
        return ctypes.cast(p, ctypes.c_void_p).value or 0, len(obj), (obj, p)
    if is_torch_tensor(obj) or hasattr(obj, "__array_interface__") or \
            hasattr(obj, "__cuda_array_interface__"):
        info = array_info(obj, what)
        if info.mem != _lib.KVL_MEM_HOST:
            raise _bad(f"{what}: needs host memory, got a CUDA array")
        n = info.itemsize
        for d in info.shape:
            n *= d
        if info.strides != _c_strides(info.shape, info.itemsize) and n:
            # Single-element dims may carry any stride.
            for s, d, c in zip(info.strides, info.shape,
                               _c_strides(info.shape, info.itemsize)):
                if d != 1 and s != c:
                    raise _bad(f"{what}: must be C-contiguous")
        if writable and hasattr(obj, "flags") and \
                not getattr(obj.flags, "writeable", True):
            raise _bad(f"{what}: the array is read-only")
        return info.ptr, n, obj
    mv = obj if isinstance(obj, memoryview) else memoryview(obj)
    if not mv.c_contiguous:
        raise _bad(f"{what}: must be C-contiguous")
    if mv.readonly:
        if writable:
            raise _bad(f"{what}: the buffer is read-only")
        data = mv.tobytes()
        p = ctypes.c_char_p(data)
        return (ctypes.cast(p, ctypes.c_void_p).value or 0, len(data),
                (data, p))
    flat = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    n = flat.nbytes
    if n == 0:
        return 0, 0, mv
    c = (ctypes.c_char * n).from_buffer(flat)
    return ctypes.addressof(c), n, (mv, flat, c)


def stream_handle(stream: Any) -> Optional[int]:
    """The cudaStream_t of ``stream``: None (the default: torch's current
    stream when torch has initialized CUDA, else the legacy default stream),
    an int handle, or an object with ``cuda_stream`` (torch) or ``ptr``
    (CuPy)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and \
                torch.cuda.is_initialized():
            return torch.cuda.current_stream().cuda_stream or None
        return None
    return _handle(stream, ("cuda_stream", "ptr", "handle"), "stream")


def event_handle(event: Any) -> Optional[int]:
    """The cudaEvent_t of ``event``: None, an int handle, or an object with
    ``cuda_event`` (torch) or ``ptr`` (CuPy)."""
    if event is None:
        return None
    return _handle(event, ("cuda_event", "ptr", "handle"), "event")


def _handle(obj, attrs, what):
    if isinstance(obj, int):
        return obj or None
    for a in attrs:
        v = getattr(obj, a, None)
        if isinstance(v, int):
            return v or None
    raise TypeError(f"{what}: expected an int handle or an object with one of "
                    f"{', '.join(attrs)}; got {type(obj).__name__}")
