# SPDX-License-Identifier: Apache-2.0
"""kvlink's own messages (kvl_log_set), routed to Python's ``logging``.

Importing kvlink sends what the library logs (a store's circuit breaker
opening and closing, a Redis node going down and coming back, an option a
store cannot honour) to the logger ``kvlink`` at the matching level, with
the part that logged it as ``record.kvlink_component``. The library's own
threshold (``KVL_LOG_LEVEL``, default warning) decides what it emits at
all; ``set_level`` changes it. At exit the library goes back to standard
error, so its threads never call into a finished interpreter.
"""

from __future__ import annotations

import atexit
import logging
from typing import Union

from . import _lib

logger = logging.getLogger("kvlink")

_TO_LOGGING = {_lib.KVL_LOG_ERROR: logging.ERROR,
               _lib.KVL_LOG_WARNING: logging.WARNING,
               _lib.KVL_LOG_INFO: logging.INFO,
               _lib.KVL_LOG_DEBUG: logging.DEBUG}
_NAMES = {"off": _lib.KVL_LOG_OFF, "error": _lib.KVL_LOG_ERROR,
          "warning": _lib.KVL_LOG_WARNING, "warn": _lib.KVL_LOG_WARNING,
          "info": _lib.KVL_LOG_INFO, "debug": _lib.KVL_LOG_DEBUG}


def _forward(user, level, component, message):  # pragma: no cover - C calls
    try:
        comp = component.decode(errors="replace")
        logger.log(_TO_LOGGING.get(level, logging.WARNING), "[%s] %s", comp,
                   message.decode(errors="replace"),
                   extra={"kvlink_component": comp})
    except Exception:  # a sink must not raise into C
        pass


_sink = _lib.kvl_log_fn(_forward)


def level() -> str:
    """The library's threshold: ``"off"``, ``"error"``, ``"warning"``,
    ``"info"`` or ``"debug"``."""
    v = _lib.lib.kvl_log_get_level()
    return next(n for n, lv in _NAMES.items() if lv == v and n != "warn")


def set_level(value: Union[str, int]) -> None:
    """Sets what the library emits: a name (``"off"``, ``"error"``,
    ``"warning"``, ``"info"``, ``"debug"``, any case) or a ``logging`` level
    (``logging.INFO``: info and more severe). ValueError otherwise."""
    if isinstance(value, str) and value.lower() in _NAMES:
        lv = _NAMES[value.lower()]
    elif isinstance(value, int) and not isinstance(value, bool):
        lv = (_lib.KVL_LOG_DEBUG if value <= logging.DEBUG else
              _lib.KVL_LOG_INFO if value <= logging.INFO else
              _lib.KVL_LOG_WARNING if value <= logging.WARNING else
              _lib.KVL_LOG_ERROR if value <= logging.CRITICAL else
              _lib.KVL_LOG_OFF)
    else:
        raise ValueError(f"kvlink.log.set_level: {value!r} is not a level "
                         f"(off, error, warning, info, debug, or a logging "
                         f"level)")
    _lib.lib.kvl_log_set(_sink, None, lv)


def _install() -> None:
    _lib.lib.kvl_log_set(_sink, None, _lib.lib.kvl_log_get_level())
    atexit.register(lambda: _lib.lib.kvl_log_set(
        _lib.kvl_log_fn(0), None,  # NULL: standard error
        _lib.lib.kvl_log_get_level()))


_install()

__all__ = ["logger", "level", "set_level"]
