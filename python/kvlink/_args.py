# SPDX-License-Identifier: Apache-2.0
"""Arguments as the C API takes them, checked before any C call.

ctypes converts a Python int to a C integer by dropping the high bits and
takes anything with ``__int__`` (``'16'`` through ``int()``, ``16.5``), so a
wrong argument used to reach the library as another value: a page size of
2**32 + 16 became 16, a request id of -1 became 2**64 - 1. Every integer
argument of the binding goes through :func:`c_int` instead, every string
through :func:`c_text`.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from typing import Any, Optional

from . import _lib
from .errors import ArgumentOutOfRange, InvalidArgument, StateError

_SIZE_MAX = ctypes.c_size_t(-1).value

#: (lowest, highest) value of each C integer type the API takes.
C_RANGES = {
    "int": (-(1 << 31), (1 << 31) - 1),
    "unsigned": (0, (1 << 32) - 1),
    "uint32_t": (0, (1 << 32) - 1),
    "uint64_t": (0, (1 << 64) - 1),
    "size_t": (0, _SIZE_MAX),
    "uintptr_t": (0, _SIZE_MAX),
}


def c_int(value: Any, ctype: str, what: str, lo: Optional[int] = None,
          hi: Optional[int] = None) -> int:
    """``value`` as an integer for a C parameter of type ``ctype``.

    Integers and objects that are integers (``__index__``: numpy integers)
    are accepted; ``bool`` is not (``True`` as a page size or an id is a
    mistake), nor are ``str`` and ``float``: TypeError naming ``what``. A
    value outside the C type's range, or outside ``lo``..``hi`` when given,
    raises ArgumentOutOfRange (a ValueError and an OverflowError) naming
    ``what`` and the range."""
    if isinstance(value, bool):
        raise TypeError(f"{what}: expected an integer, got bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: expected an integer, got "
                        f"{type(value).__name__} {value!r}") from None
    tlo, thi = C_RANGES[ctype]
    lo = tlo if lo is None else max(lo, tlo)
    hi = thi if hi is None else min(hi, thi)
    if not lo <= v <= hi:
        raise ArgumentOutOfRange(_lib.KVL_EINVAL,
                                 f"{what}: {v} is out of range ({lo}..{hi}"
                                 f"{', ' + ctype if (lo, hi) == (tlo, thi) else ''})")
    return v


def c_text(value: Any, what: str) -> bytes:
    """``value`` (a str) as UTF-8 for a C string parameter: TypeError for
    anything else, InvalidArgument for a NUL character (C would end the
    string there and see another value)."""
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got "
                        f"{type(value).__name__} {value!r}")
    if "\0" in value:
        raise InvalidArgument(_lib.KVL_EINVAL,
                              f"{what}: {value!r} holds a NUL character")
    return value.encode()


class CallGuard:
    """Calls in flight on one C handle, so that closing it waits for them
    instead of freeing memory another thread is still inside.

    ``enter()`` / ``leave()`` bracket every call that uses the handle (the
    :func:`guarded` decorator does it); ``enter`` refuses with StateError
    once the handle is closing or closed. ``close(free)`` marks the handle
    closing, waits until no call is in flight and runs ``free``; a close
    from a thread that is itself inside a call on the handle (a callback)
    would wait for itself, so it raises StateError instead."""

    def __init__(self, what: str):
        self._what = what
        self._cv = threading.Condition()
        self._threads: dict = {}  # thread ident -> calls it has in flight
        self._n = 0
        self._closing = False
        self._closed = False

    def enter(self) -> None:
        with self._cv:
            me = threading.get_ident()
            # A thread already inside a call finishes it, nested calls
            # included, while close() waits for it.
            if self._closed or (self._closing and me not in self._threads):
                raise StateError(_lib.KVL_ESTATE,
                                 f"the {self._what} is "
                                 f"{'closed' if self._closed else 'closing'}")
            self._threads[me] = self._threads.get(me, 0) + 1
            self._n += 1

    def leave(self) -> None:
        with self._cv:
            me = threading.get_ident()
            left = self._threads[me] - 1
            if left:
                self._threads[me] = left
            else:
                del self._threads[me]
            self._n -= 1
            if self._n == 0:
                self._cv.notify_all()

    def close(self, free, check=None) -> bool:
        """Waits for the calls in flight, then runs ``free()``; False if
        already closed. ``check()``, run first under the guard's lock, may
        raise to refuse the close (nothing changes then)."""
        with self._cv:
            if self._closed:
                return False
            if check is not None:
                check()
            if self._threads.get(threading.get_ident()):
                raise StateError(_lib.KVL_ESTATE,
                                 f"close() of the {self._what} from inside "
                                 f"a call on it (a callback): close it "
                                 f"after that call returns")
            if self._closing:  # another thread closes it: wait for that
                while not self._closed:
                    self._cv.wait()
                return False
            self._closing = True
            while self._n:
                self._cv.wait()
        try:
            free()
        finally:
            with self._cv:
                self._closing = False
                self._closed = True
                self._cv.notify_all()
        return True

    @property
    def in_flight(self) -> int:
        """Calls in flight now (for tests and diagnostics)."""
        with self._cv:
            return self._n


def guarded(fn):
    """Runs method ``fn`` as a call in flight on ``self._guard``."""
    import functools

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        self._guard.enter()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._guard.leave()
    return call
