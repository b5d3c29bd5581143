# SPDX-License-Identifier: Apache-2.0
"""SGLang's device KV pools, described as a kvlink Layout.

SGLang's linker contract names pools by ``PoolName`` ("kv", "swa",
"indexer", "deepseek_v4_c4", "draft", …) and hands each transfer's pages as
token indices (or, for pools whose rows are pages, page-aligned indices) of
a *source* pool: the full-attention pool ("kv") or the sliding-window pool
("swa"). A :class:`PoolSpec` is one kvlink pool made from that: its name
(SGLang's), its source, its tensors per pipeline-stage-local layer and
component, and how a source's indices map onto its rows.

The pools are read from the objects SGLang builds (duck-typed: nothing here
imports SGLang):

- MHA (``k_buffer``/``v_buffer`` per layer): pool "kv", components k and v;
- MLA (``kv_buffer``): pool "kv", one latent, replicated across TP ranks;
- DSA (MLA + ``index_k_with_scale_buffer``): "kv" and "indexer", both
  replicated; the indexer's rows are pages;
- sliding-window hybrids (``full_kv_pool``, ``swa_kv_pool``,
  ``layers_mapping``): "kv" for the full layers, "swa" (TRAILING_PAGES over
  the window) for the others;
- any pool group SGLang's own assembler builds (``DevicePoolGroup``: the
  DeepSeek-V4 pools, draft sidecars): each entry as it describes itself;
- draft (EAGLE/MTP) pools: "draft" (and "draft_swa"), the draft model's
  layers numbered from 0 as SGLang's draft pools wait on them.

Mamba hybrids keep their recurrent state per request, not per page, so no
page-keyed store can restore it: they are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._buffers import dtype_name
from .layout import HitPolicy, Layout, Shard

KV, SWA = "kv", "swa"


@dataclass
class PoolSpec:
    """One kvlink pool made from SGLang's pools."""
    name: str                       #: SGLang's PoolName value
    source: str                     #: KV or SWA: whose transfer feeds it
    #: component name → {stage-local layer: tensor}
    components: Dict[str, Dict[int, Any]] = field(default_factory=dict)
    rows_are_pages: bool = False    #: a tensor row is a page, not a token
    replicated: bool = False        #: identical on every TP rank (MLA)
    #: the source transfer's indices → this pool's rows (a pool group
    #: entry's translate_indices; SGLang's SWA indices need none)
    translate: Optional[Callable[[Any], Any]] = None
    dtype: Optional[str] = None
    memory_layout: str = ""

    def add(self, component: str, layer: int, tensor: Any) -> None:
        self.components.setdefault(component, {})[layer] = tensor


class Unsupported(ValueError):
    """SGLang's pools have a shape kvlink cannot cache."""


def _group_rank(group: Any) -> Tuple[int, int]:
    """(rank, size) of a torch ProcessGroup (or anything with rank() and
    size()); (0, 1) for None."""
    if group is None:
        return 0, 1
    return int(group.rank()), int(group.size())


def shard_of(params: Any) -> Shard:
    """This rank's shard from SGLang's cache init params: tp from the
    attention TP group (the TP group without DP attention), cp from the
    attention CP group (SGLang leaves attn_cp_rank at its default), pp from
    pp_rank and pp_size."""
    group = getattr(params, "attn_tp_cache_group", None) or \
        getattr(params, "tp_cache_group", None)
    tp_rank, tp_size = _group_rank(group)
    cp = getattr(params, "attn_cp_cache_group", None)
    if cp is not None:
        cp_rank, cp_size = _group_rank(cp)
    else:
        cp_rank = int(getattr(params, "attn_cp_rank", 0) or 0)
        cp_size = int(getattr(params, "attn_cp_size", 1) or 1)
    return Shard(tp_rank=tp_rank, tp_size=tp_size, cp_rank=cp_rank,
                 cp_size=cp_size,
                 pp_rank=int(getattr(params, "pp_rank", 0) or 0),
                 pp_size=int(getattr(params, "pp_size", 1) or 1))


def _dtype_of(pool: Any, tensor: Any) -> str:
    """The element type a pool means (its ``dtype``: fp8 pools store
    uint8 but mean float8), else the tensor's."""
    d = getattr(pool, "dtype", None)
    return dtype_name(d if d is not None else tensor.dtype)


def _attention_spec(name: str, source: str, pool: Any,
                    layers: Sequence[Tuple[int, int]]) -> PoolSpec:
    """An MHA (k, v) or MLA (latent) pool's buffers at (layer, buffer
    index) pairs."""
    kind = type(pool).__name__
    layout = str(getattr(pool, "kv_cache_layout", None) or "nhd").lower()
    if "PageMajor" in kind or "HiSparse" in kind or \
            layout not in ("nhd", "hnd"):
        raise Unsupported(f"pool {name!r}: {kind} with the {layout!r} "
                          f"layout keeps pages where kvlink cannot address "
                          f"them (NHD and HND pools only)")
    if getattr(pool, "k_buffer", None) is not None:
        # HND tensors are [pages, heads, page_size, head_dim]: a row is a
        # page.
        spec = PoolSpec(name, source, memory_layout=layout.upper(),
                        rows_are_pages=layout == "hnd")
        for layer, idx in layers:
            spec.add("k", layer, pool.k_buffer[idx])
            spec.add("v", layer, pool.v_buffer[idx])
        first = pool.k_buffer[layers[0][1]] if layers else None
    elif getattr(pool, "kv_buffer", None) is not None:
        spec = PoolSpec(name, source, replicated=True)
        for layer, idx in layers:
            spec.add("kv", layer, pool.kv_buffer[idx])
        first = pool.kv_buffer[layers[0][1]] if layers else None
    else:
        raise Unsupported(f"pool {name!r}: {type(pool).__name__} has neither "
                          f"k_buffer/v_buffer (MHA) nor kv_buffer (MLA)")
    if first is not None:
        spec.dtype = _dtype_of(pool, first)
    return spec


def _all_layers(pool: Any) -> List[Tuple[int, int]]:
    bufs = getattr(pool, "k_buffer", None)
    if bufs is None:
        bufs = pool.kv_buffer
    return [(i, i) for i in range(len(bufs))]


def sliding_window_pages(params: Any, kvcache: Any, page_size: int,
                          extra: Dict[str, Any]) -> int:
    if extra.get("swa_window_pages"):
        return int(extra["swa_window_pages"])
    window = getattr(params, "sliding_window_size", None) or \
        getattr(kvcache, "sliding_window_size", None)
    if not window:
        raise Unsupported("a sliding-window pool, but no sliding_window_size "
                          "in the cache params: set linker_extra_config's "
                          "swa_window_pages")
    return max(1, math.ceil(int(window) / page_size))


def _swa_specs(kvcache: Any, params: Any) -> List[PoolSpec]:
    start = int(getattr(kvcache, "start_layer", 0) or 0)
    full: List[Tuple[int, int]] = []
    swa: List[Tuple[int, int]] = []
    for layer, (idx, is_swa) in sorted(kvcache.layers_mapping.items()):
        (swa if is_swa else full).append((int(layer) - start, int(idx)))
    specs = []
    if full:
        specs.append(_attention_spec(KV, KV, kvcache.full_kv_pool, full))
    if swa:
        specs.append(_attention_spec(SWA, SWA, kvcache.swa_kv_pool, swa))
    return specs


def _dsa_specs(kvcache: Any) -> List[PoolSpec]:
    kv = _attention_spec(KV, KV, kvcache, _all_layers(kvcache))
    indexer = PoolSpec("indexer", KV, rows_are_pages=True, replicated=True)
    for i, t in enumerate(kvcache.index_k_with_scale_buffer):
        if t.shape[0]:  # layers without top-k selection have no indexer
            indexer.add("k_scale", i, t)
    first = kvcache.index_k_with_scale_buffer[0]
    indexer.dtype = dtype_name(first.dtype)
    return [kv, indexer]


def _group_specs(group: Any) -> List[PoolSpec]:
    """Specs from SGLang's DevicePoolGroup (its own assembler's view)."""
    specs = []
    replicated = bool(getattr(group, "rank_replicated", False))
    for entry in group.entries:
        name = str(getattr(entry.name, "value", entry.name))
        src = str(getattr(entry.indices_from_pool, "value",
                          entry.indices_from_pool))
        rows = getattr(entry, "rows_are_pages", None)
        if rows is None:
            rows = getattr(entry, "_row_span", 0) == 1
        spec = PoolSpec(name, SWA if src == SWA else KV,
                        rows_are_pages=bool(rows), replicated=replicated,
                        translate=getattr(entry, "translate_indices", None))
        for c, buffers in enumerate(entry.components):
            for layer, idx in sorted(entry.layer_mapping.items()):
                for j, b in enumerate([idx] if isinstance(idx, int)
                                      else list(idx)):
                    if buffers[b].shape[0]:  # empty: no data at that layer
                        comp = f"c{c}" if j == 0 else f"c{c}.{j}"
                        spec.add(comp, int(layer), buffers[b])
        first = next(iter(next(iter(spec.components.values())).values()))
        spec.dtype = dtype_name(first.dtype)
        specs.append(spec)
    return specs


def _draft_specs(params: Any) -> List[PoolSpec]:
    """Draft pools share the target's token indices; their layers are
    numbered from 0, so they are loaded with the target's first layers
    (SGLang's draft pools never wait: its draft runs after the target's
    forward, whose waits cover them)."""
    pools = tuple(getattr(params, "direct_linker_draft_device_pools", ()) or
                  getattr(params, "mtp_draft_device_pools", ()) or ())
    specs = []
    for pool in pools:
        if getattr(pool, "swa_kv_pool", None) is not None:
            for spec in _swa_specs(pool, params):
                spec.name = "draft" if spec.name == KV else "draft_swa"
                specs.append(spec)
        else:
            specs.append(_attention_spec("draft", KV, pool,
                                         _all_layers(pool)))
    return specs


def pool_specs(kvcache: Any, params: Any,
               resolve_group: Optional[Callable[[], Any]] = None
               ) -> List[PoolSpec]:
    """kvlink pools for SGLang's device pools (see the module's text).
    ``resolve_group``: builds SGLang's DevicePoolGroup, for pools only its
    assembler knows (None: SGLang is not there)."""
    kind = type(kvcache).__name__
    if getattr(kvcache, "mamba_pool", None) is not None or \
            "Mamba" in kind or "HybridLinear" in kind:
        raise Unsupported(
            f"{kind}: Mamba hybrids keep their recurrent state per request, "
            f"not per page, so kvlink cannot restore it from pages")
    if getattr(kvcache, "swa_kv_pool", None) is not None and \
            getattr(kvcache, "layers_mapping", None) is not None:
        specs = _swa_specs(kvcache, params)
    elif getattr(kvcache, "index_k_with_scale_buffer", None) is not None \
            and getattr(kvcache, "kv_buffer", None) is not None:
        specs = _dsa_specs(kvcache)
    elif getattr(kvcache, "k_buffer", None) is not None or \
            getattr(kvcache, "kv_buffer", None) is not None:
        specs = [_attention_spec(KV, KV, kvcache, _all_layers(kvcache))]
    elif resolve_group is not None:
        return _group_specs(resolve_group())
    else:
        raise Unsupported(f"{kind}: an SGLang pool kvlink does not know; "
                          f"its own pool assembler (SGLang's "
                          f"resolve_hybrid_device_pool_group) is needed")
    return specs + _draft_specs(params)


def build_layout(specs: Sequence[PoolSpec], tag: str, page_size: int,
                 shard: Shard, window_pages: int) -> Layout:
    """A finalized Layout with one pool per spec: kv-sourced pools need
    every page (ALL_PAGES), swa-sourced ones the window's last pages."""
    layout = Layout(tag, page_size, shard=shard)
    for spec in specs:
        if spec.source == SWA:
            pid = layout.add_pool(spec.name, HitPolicy.TRAILING_PAGES,
                                  window_pages, replicated_tp=spec.replicated,
                                  dtype=spec.dtype,
                                  memory_layout=spec.memory_layout)
        else:
            pid = layout.add_pool(spec.name, replicated_tp=spec.replicated,
                                  dtype=spec.dtype,
                                  memory_layout=spec.memory_layout)
        for comp, layers in spec.components.items():
            for layer, tensor in sorted(layers.items()):
                if not spec.rows_are_pages:  # whole pages of tokens only
                    tensor = tensor[:tensor.shape[0] // page_size * page_size]
                layout.add_array(pid, comp, layer, tensor,
                                 tokens=not spec.rows_are_pages)
    return layout.finalize()


__all__ = ["PoolSpec", "Unsupported", "pool_specs", "build_layout",
           "shard_of", "sliding_window_pages", "KV", "SWA"]
