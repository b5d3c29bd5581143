# SPDX-License-Identifier: Apache-2.0
"""What the engine adapters (kvlink.sglang, kvlink.vllm) share: the store
they open from an engine's config, which may be down when the engine
starts, and warnings that hot paths may not repeat.

An engine must start and run without its cache when the cache's store is
unreachable: :class:`StoreLink` opens the store lazily, retries at most
every ``reconnect_s`` seconds, and builds the adapter's kvlink object over
it (a Linker, a Prober) once it opens. A store that cannot be opened for
another reason than being unreachable (a malformed URI, a backend this
build lacks) is a configuration error, raised when the engine starts.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any, Callable, Dict, Generic, Optional, TypeVar

from .errors import KvlinkError, StoreIOError, Timeout
from .store import Store, redact_uri

T = TypeVar("T")


class Warnings:
    """log.warning at most once per `every` seconds per kind."""

    def __init__(self, log: logging.Logger, every: float = 30.0):
        self._log, self._every = log, every
        self._next: Dict[str, float] = {}

    def __call__(self, kind: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now >= self._next.get(kind, 0.0):
            self._next[kind] = now + self._every
            self._log.warning(msg, *args)


class StoreLink(Generic[T]):
    """The store named by an engine's config (a URI, or an open Store that
    the caller owns) and the kvlink object `make(store)` builds over it.

    ``get()`` returns that object, opening the store when it is not open
    and a retry is due; None while the store cannot be reached. ``opens``
    and ``failures`` count the attempts; ``close()`` closes what it opened
    and never reopens."""

    def __init__(self, store: Any, reconnect_s: float,
                 make: Callable[[Store], T], warn: Warnings, engine: str):
        self._spec = store
        self._reconnect_s = float(reconnect_s)
        self._make = make
        self._warn = warn
        self._engine = engine
        self._store: Optional[Store] = None
        self.obj: Optional[T] = None
        self._retry_at = 0.0
        self.failures = 0

    def describe(self) -> str:
        s = self._spec
        return repr(s) if isinstance(s, Store) else redact_uri(s)

    def get(self, starting: bool = False) -> Optional[T]:
        if self.obj is not None or time.monotonic() < self._retry_at:
            return self.obj
        shared = isinstance(self._spec, Store)  # the caller's: kept open
        try:
            self._store = self._spec if shared else Store(self._spec)
            self.obj = self._make(self._store)
            if self.failures:
                self._warn("reopen", "kvlink: store %s is open again",
                           self.describe())
        except KvlinkError as e:
            if self._store is not None and not shared:
                self._store.close()
            self._store = None
            if starting and not isinstance(e, (StoreIOError, Timeout)):
                raise
            self._retry_at = time.monotonic() + self._reconnect_s
            self.failures += 1
            self._warn("open", "kvlink: cannot open store %s (%s); %s runs "
                       "without it, retrying every %.0f s", self.describe(),
                       e, self._engine, self._reconnect_s)
        return self.obj

    def close(self) -> None:
        obj, self.obj = self.obj, None
        if obj is not None:
            obj.close()  # type: ignore[attr-defined]
        if self._store is not None and not isinstance(self._spec, Store):
            self._store.close()
        self._store = None
        self._retry_at = float("inf")  # never reopened


_TAG_RE = re.compile(r"[^A-Za-z0-9._+/-]")


def model_tag(model: Any, override: Any, default: str) -> str:
    """A layout's model tag: `override` (the extra config's model_tag),
    else the engine's model name or path, with characters outside
    [A-Za-z0-9._+/-] replaced and cut to its last 64 (the fingerprint still
    covers sizes, dtypes and layers)."""
    tag = _TAG_RE.sub("-", str(override or model or default)).strip("/")
    return (tag or default)[-64:]


def check_numbers(cfg: Dict[str, Any], keys, what: str) -> None:
    """ValueError unless every cfg[key] is a number >= 0."""
    for key in keys:
        try:
            value = float(cfg[key])
        except (TypeError, ValueError):
            value = -1.0
        if not value >= 0:
            raise ValueError(f"{what}: {key} must be a number >= 0, got "
                             f"{cfg[key]!r}")


def stream_event(cuda: bool) -> Any:
    """A CUDA event recorded now on the current stream (what a load or an
    offload starts after), or None for pools in host memory."""
    if not cuda:
        return None
    import torch
    ev = torch.cuda.Event()
    ev.record()
    return ev


#: The environment variable that names a config file.
CONFIG_ENV = "KVL_CONFIG"


def _read_file(path: str) -> Dict[str, Any]:
    """A config file: JSON, or TOML (``.toml``, Python 3.11+)."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".toml"):
        try:
            import tomllib
        except ImportError:  # pragma: no cover - Python < 3.11
            raise ValueError(f"{path}: TOML needs Python 3.11 or later; "
                             f"write the file as JSON") from None
        data = tomllib.loads(raw.decode())
    else:
        try:
            data = json.loads(raw.decode())
        except ValueError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of keys")
    return data


def _env_name(key: str) -> str:
    return "KVL_" + key.upper()


def _from_env(key: str, default: Any) -> Any:
    """KVL_<KEY>'s value (it is set), typed after the default's type."""
    text = os.environ[_env_name(key)]
    typ = int if isinstance(default, int) else \
        float if isinstance(default, float) else str
    try:
        return typ(text)
    except ValueError:
        raise ValueError(f"{_env_name(key)}={text!r}: expected a number") \
            from None


def _check_keys(layer: Dict[str, Any], defaults: Dict[str, Any],
                where: str, also: str = "") -> None:
    """ValueError naming the keys of ``layer`` that are not settings."""
    unknown = sorted(set(layer) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (known: "
                         f"{sorted(defaults)}{also})")


def config(given: Optional[Dict[str, Any]], defaults: Dict[str, Any],
           what: str, engine: str = "") -> Dict[str, Any]:
    """An adapter's settings, each from the first that has it: the engine's
    extra config (``given``), the environment (``KVL_<KEY>``, e.g.
    KVL_STORE), a config file (``config_file`` in ``given``, else
    $KVL_CONFIG: JSON, or TOML; its keys, and those of its ``engine``
    section, ``"sglang"`` or ``"vllm"``, which win), the defaults.
    ValueError naming an unknown key, the file, or a variable whose value
    does not fit."""
    given = dict(given or {})
    path = given.pop("config_file", None) or os.environ.get(CONFIG_ENV)
    layers = []
    if path:
        data = _read_file(str(path))
        section = data.pop(engine, {}) if engine else {}
        for other in ("sglang", "vllm"):
            data.pop(other, None)
        if not isinstance(section, dict):
            raise ValueError(f"{path}: [{engine}] must be a table of keys")
        _check_keys(data, defaults, f"{what}: {path}")
        _check_keys(section, defaults, f"{what}: {path} [{engine}]")
        layers += [data, section]
    layers.append({key: _from_env(key, default)
                   for key, default in defaults.items()
                   if _env_name(key) in os.environ})
    _check_keys(given, defaults, what, " and config_file")
    layers.append(given)
    cfg = dict(defaults)
    for layer in layers:
        cfg.update(layer)
    return cfg


class EngineClass:
    """An adapter's engine-facing class, built on first use as a subclass
    of the engine's base class, so that importing the adapter needs no
    engine: ``module.__getattr__`` returns ``get(name)``.

    name       the class's name in the adapter module (``module``);
    impl       the adapter's implementation (first in the MRO);
    base_path  ``"package.module.BaseClass"`` of the engine's base;
    engine     the engine's name, for the error without it."""

    def __init__(self, module: str, name: str, impl: type, base_path: str,
                 engine: str):
        self._module, self._name, self._impl = module, name, impl
        self._base_module, _, self._base_name = base_path.rpartition(".")
        self._engine = engine
        self._cls: Optional[type] = None

    def get(self, name: str) -> type:
        if name != self._name:
            raise AttributeError(f"module {self._module!r} has no attribute "
                                 f"{name!r}")
        if self._cls is None:
            try:
                base = getattr(__import__(self._base_module, fromlist=["_"]),
                               self._base_name)
            except (ImportError, AttributeError) as e:
                raise ImportError(
                    f"{self._module}.{self._name} needs {self._engine}'s "
                    f"{self._base_module}.{self._base_name}: {e}") from e
            # The engine's base is an ABC: its metaclass builds the class,
            # and finds every abstract method implemented.
            self._cls = type(base)(self._name, (self._impl, base),
                                   {"__module__": self._module,
                                    "__doc__": self._impl.__doc__})
        return self._cls


__all__ = ["EngineClass", "StoreLink", "Warnings", "check_numbers", "config",
           "model_tag"]
