# SPDX-License-Identifier: Apache-2.0
"""kvlink's metrics for an engine's own Prometheus endpoint.

:class:`KvlinkCollector` is a collector for the ``prometheus_client``
package: registered with a registry, it yields the current counters,
gauges and histograms of a :class:`~kvlink.Linker` (which include its
store's) or of a :class:`~kvlink.Store` at every scrape::

    from prometheus_client import REGISTRY
    REGISTRY.register(kvlink.metrics.KvlinkCollector(linker))

The families are kvlink's own Prometheus text (``render_stats``), parsed
by ``prometheus_client``'s parser: counters end in ``_total``; histogram
bounds are exact (2^k microseconds, in seconds). Importing this module
needs no ``prometheus_client``; collecting does.
"""

from __future__ import annotations

from typing import Any, Iterator


class KvlinkCollector:
    """A prometheus_client collector over a Linker or a Store (``source``:
    anything with ``render_stats("prometheus")``). A closed source yields
    nothing."""

    def __init__(self, source: Any):
        if not hasattr(source, "render_stats"):
            raise TypeError(f"KvlinkCollector: expected a kvlink Linker or "
                            f"Store, got {type(source).__name__}")
        self._source = source

    def collect(self) -> Iterator[Any]:
        from prometheus_client.parser import text_string_to_metric_families
        if getattr(self._source, "closed", False):
            return
        text = self._source.render_stats("prometheus")
        yield from text_string_to_metric_families(text)

    def describe(self) -> Iterator[Any]:
        """Nothing up front: the families are known at the first scrape
        (prometheus_client then calls collect to learn them)."""
        return iter(())


__all__ = ["KvlinkCollector"]
