# SPDX-License-Identifier: Apache-2.0
"""kvlink's error codes as Python exceptions.

Every failing C call becomes a :class:`KvlinkError` (or one of its subclasses)
carrying the negative code (``.code``), its symbolic name (``.name``, e.g.
``"KVL_EINVAL"``) and the message of the handle that failed (``.message``: which
argument, key or backend text was wrong). Subclasses for common codes also
derive from the matching built-in exception, so ``except TimeoutError`` or
``except ValueError`` work as expected.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Type

from . import _lib


class KvlinkError(Exception):
    """A kvlink call failed.

    Attributes:
        code: the negative kvl_errno code (e.g. -1 for KVL_EINVAL).
        name: its symbolic name, e.g. ``"KVL_EINVAL"``.
        message: what was wrong, from the handle's error message (falls back
            to the code's description when the handle has none).
    """

    code: int
    name: str
    message: str

    def __init__(self, code: int, message: Optional[str] = None):
        self.code = int(code)
        self.name = _lib.err_name(self.code)
        self.message = message or _lib.strerror(self.code)
        super().__init__(self.code, self.message)

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class InvalidArgument(KvlinkError, ValueError):
    """KVL_EINVAL: an argument is invalid (the message says which)."""


class OutOfMemory(KvlinkError, MemoryError):
    """KVL_ENOMEM."""


class NotFound(KvlinkError, LookupError):
    """KVL_ENOTFOUND: unknown pool, request, batch, or an absent object."""


class OutOfRange(KvlinkError, ValueError):
    """KVL_ERANGE: a slot, layer or size beyond its limit."""


class AlreadyExists(KvlinkError):
    """KVL_EEXIST: a duplicate name or request id."""


class StoreIOError(KvlinkError):
    """KVL_EIO: the store failed or is unreachable."""


class Corrupt(KvlinkError):
    """KVL_ECORRUPT: an object failed its integrity checks."""


class Timeout(KvlinkError, TimeoutError):
    """KVL_ETIMEDOUT."""


class Canceled(KvlinkError):
    """KVL_ECANCELED: the request or batch was canceled (cancel, shutdown)."""


class Full(KvlinkError):
    """KVL_EFULL: a queue or the store is full; poll and try again."""


class Closed(KvlinkError):
    """KVL_ECLOSED: the handle is shutting down or closed."""


class NotSupported(KvlinkError):
    """KVL_ENOTSUP: not in this build (CUDA, Redis) or this store."""


class ParseError(KvlinkError, ValueError):
    """KVL_EPARSE: malformed input, e.g. a store URI."""


class StateError(KvlinkError):
    """KVL_ESTATE: the call is not allowed now (e.g. layout not finalized)."""


class PermissionDenied(KvlinkError, PermissionError):
    """KVL_EPERM: the store's access control refused the key (e.g. a Redis
    ACL whose key patterns do not cover it)."""


class ArgumentOutOfRange(InvalidArgument, OverflowError):
    """An integer argument outside what its C parameter holds (or the
    range the call documents): raised by the binding before any C call,
    with code KVL_EINVAL. Both a ValueError and an OverflowError."""


# The class of each code the binding names; codes come from the library's
# table (_lib.ERRNO), so a code the library adds later raises KvlinkError.
_BY_NAME: Dict[str, Type[KvlinkError]] = {
    "KVL_EINVAL": InvalidArgument,
    "KVL_ENOMEM": OutOfMemory,
    "KVL_ENOTFOUND": NotFound,
    "KVL_ERANGE": OutOfRange,
    "KVL_EEXIST": AlreadyExists,
    "KVL_EIO": StoreIOError,
    "KVL_ECORRUPT": Corrupt,
    "KVL_ETIMEDOUT": Timeout,
    "KVL_ECANCELED": Canceled,
    "KVL_EFULL": Full,
    "KVL_ECLOSED": Closed,
    "KVL_ENOTSUP": NotSupported,
    "KVL_EPARSE": ParseError,
    "KVL_ESTATE": StateError,
    "KVL_EPERM": PermissionDenied,
}
_BY_CODE: Dict[int, Type[KvlinkError]] = {
    _lib.ERRNO[name]: cls for name, cls in _BY_NAME.items()}


def error_class(code: int) -> Type[KvlinkError]:
    """The exception class kvlink raises for error ``code``."""
    return _BY_CODE.get(int(code), KvlinkError)


def make_error(code: int, message: Optional[str] = None,
               context: Optional[str] = None) -> KvlinkError:
    """Builds the exception for ``code``. ``message`` is the failing
    handle's own message (it already names the call and argument); without
    one, the code's description prefixed with ``context``."""
    if message:
        return error_class(code)(code, message)
    text = _lib.strerror(code)
    if context:
        text = f"{context}: {text}"
    return error_class(code)(code, text)


def check(rc: int, errmsg: Optional[Callable[[], str]] = None,
          context: Optional[str] = None) -> int:
    """Returns ``rc`` when it is not negative; else raises its exception,
    with the message from ``errmsg()`` (the failing handle's message)."""
    if rc >= 0:
        return rc
    message = None
    if errmsg is not None:
        try:
            message = errmsg()
        except Exception:  # pragma: no cover - message is best effort
            message = None
    raise make_error(rc, message or None, context)


__all__ = [
    "KvlinkError", "InvalidArgument", "OutOfMemory", "NotFound", "OutOfRange",
    "AlreadyExists", "StoreIOError", "Corrupt", "Timeout", "Canceled", "Full",
    "Closed", "NotSupported", "ParseError", "StateError",
    "ArgumentOutOfRange", "error_class",
]
