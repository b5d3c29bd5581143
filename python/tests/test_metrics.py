# SPDX-License-Identifier: Apache-2.0
"""Prometheus text from kvlink passes a strict parser (prometheus_client's):
counters end in _total, histogram bounds are exact, and the collector
exports a linker's metrics through a registry."""

import pytest

from conftest import PAGE_SIZE, kv_layout, kv_pool, tokens
import kvlink as kvl
from kvlink.metrics import KvlinkCollector

prom = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa


def linker(store):
    lk = kvl.Linker(kv_layout(kv_pool(seed=1)), store)
    pages = kvl.hash_pages(tokens(3), PAGE_SIZE)
    lk.offload(1, pages, range(3))
    lk.flush(timeout=10)
    lk.poll_until([1], 10)
    assert lk.lookup(pages) == 3
    return lk


def test_names_and_bounds(store):
    with linker(store) as lk:
        text = lk.render_stats("prometheus")
    families = list(text_string_to_metric_families(text))
    kinds = {f.type for f in families}
    assert {"counter", "gauge", "histogram"} <= kinds
    for f in families:
        for s in f.samples:
            if f.type == "counter":
                assert s.name.endswith("_total"), s.name
            else:
                assert not s.name.endswith("_total"), s.name
    hist = next(f for f in families if f.name == "kvlink_lookup_seconds")
    bounds = [s.labels["le"] for s in hist.samples
              if s.name.endswith("_bucket")]
    assert bounds[-1] == "+Inf"
    for k, b in enumerate(bounds[:-1]):  # 2^k µs, not rounded by %g
        assert float(b) == 2 ** k / 1e6, (k, b)
    hits = next(f for f in families if f.name == "kvlink_store_hits")
    assert hits.type == "counter" and hits.samples[0].value >= 3


def test_collector(store):
    registry = prom.CollectorRegistry()
    lk = linker(store)
    registry.register(KvlinkCollector(lk))
    out = prom.generate_latest(registry).decode()
    assert "kvlink_lookups_total 1.0" in out
    assert "kvlink_store_hits_total" in out
    assert 'kvlink_batch_seconds_bucket{le="1.048576"}' in out
    lk.close()
    assert "kvlink_lookups_total" not in \
        prom.generate_latest(registry).decode()
    with pytest.raises(TypeError, match="Linker or Store"):
        KvlinkCollector(object())
