# SPDX-License-Identifier: Apache-2.0
"""Lifetimes of the C objects: each closes on exit from a ``with`` block and
when collected; Layout, Store and RankGroup, which open linkers use, refuse
to close while one is open. Closing waits for the calls other threads have
in flight on the object (see _args.CallGuard): the C object is never freed
under a call."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator, Sequence

from . import _lib
from ._args import CallGuard
from .errors import StateError


class Closable:
    """A C object with ``close()``: a context manager that also closes
    when collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Never under an open linker; at interpreter shutdown, quietly.
        try:
            self.close()
        except Exception:
            pass


class SharedHandle(Closable):
    """A C object that linkers use. Subclasses set ``_what`` (its name in
    messages) and ``_free`` (frees ``self._h`` and resets it to NULL)."""

    _what = "object"

    def __init__(self, null: Any):
        self._h = null
        self._users: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Users whose C handles are open, counted apart from the weak set:
        # a user collected in a cycle leaves the set before its finalizer
        # frees its handle, which may still touch this object (a linker's
        # close forgets the memory it registered with its store).
        self._open = 0
        self._guard = CallGuard(self._what)

    def _free(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        return not self._h

    def close(self) -> None:
        """Frees the object once the calls other threads have in flight on
        it returned (calls that start meanwhile raise StateError). Fails
        with StateError while an open linker uses it, or when called from
        inside a call on the object. Closing twice is harmless."""
        guard = getattr(self, "_guard", None)
        if guard is None:  # __init__ failed before there was a handle
            return

        def check():
            busy = max(self._open,
                       sum(1 for u in self._users if not u.closed))
            if busy:
                raise StateError(_lib.KVL_ESTATE,
                                 f"{self._what} is used by {busy} open "
                                 f"linker(s) or prober(s); close them first")

        def free():
            if self._h:
                self._free()

        guard.close(free, check)


@contextlib.contextmanager
def opening_over(user: Any, used: Sequence[SharedHandle]) -> Iterator[None]:
    """The objects `user` (a linker, a prober) opens over: they stay open
    while the body opens it (their close waits), and are in use by it
    (they refuse to close) once the body returned without an error."""
    entered = []
    try:
        for obj in used:
            obj._guard.enter()
            entered.append(obj)
        yield
        for obj in used:
            obj._users.add(user)
            obj._open += 1
    finally:
        for obj in entered:
            obj._guard.leave()


def released(used: Sequence[SharedHandle]) -> None:
    """The user that opened over `used` (opening_over) freed its handle."""
    for obj in used:
        obj._open -= 1
