# SPDX-License-Identifier: Apache-2.0
"""vLLM's KV caches, described as kvlink layouts: the workers' from their
tensors (register_kv_caches), the scheduler's from the KV cache config by
sizes only, for a Prober. Both name the same pool ("kv"), components and
layers, so both derive the same keys.

The tensors vLLM registers per attention layer (before its 2026 layout
refactor):

- FlashAttention ``[2, num_blocks, block_size, kv_heads, head_size]``:
  components k (``t[0]``) and v (``t[1]``);
- FlashInfer (and Triton) ``[num_blocks, 2, block_size, kv_heads,
  head_size]``: k ``t[:, 0]`` and v ``t[:, 1]``;
- MLA ``[num_blocks, block_size, head_size]``: one latent "kv", replicated
  across tensor-parallel ranks.

A page is a block. Each component's block must be one contiguous region
(NHD or HND order: the strides say which, and the order joins the
fingerprint). Layers that share one tensor are described once, by the
first of their names. Layers are numbered from their names
(``model.layers.<n>.…``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Tuple

from ._buffers import array_info, dtype_name
from .layout import Layout, Shard

POOL = "kv"
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.|$)")


class Unsupported(ValueError):
    """vLLM's KV caches have a shape kvlink cannot cache."""


def layer_number(name: str, index: int) -> int:
    """The model layer of an attention layer's name, else its index among
    the sorted names."""
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else index


def ordered_layers(names: Sequence[str]) -> List[Tuple[str, int]]:
    """(name, layer number) in layer order."""
    idx = {n: i for i, n in enumerate(sorted(names))}
    return sorted(((n, layer_number(n, idx[n])) for n in names),
                  key=lambda x: (x[1], x[0]))


def is_mla_spec(spec: Any) -> bool:
    return "MLA" in type(spec).__name__


def _components(t: Any, what: str) -> List[Tuple[str, Any]]:
    """(component, view with the block as its first dimension)."""
    shape = tuple(t.shape)
    if len(shape) == 5 and shape[0] == 2:
        return [("k", t[0]), ("v", t[1])]
    if len(shape) == 5 and shape[1] == 2:
        return [("k", t[:, 0]), ("v", t[:, 1])]
    if len(shape) == 3:
        return [("kv", t)]
    raise Unsupported(f"{what}: a KV cache tensor of shape {shape} (kvlink "
                      f"knows [2, blocks, block_size, heads, head_size], "
                      f"[blocks, 2, block_size, heads, head_size] and MLA's "
                      f"[blocks, block_size, head_size])")


def _block_region(view: Any, what: str) -> Tuple[int, int, int, str, Any]:
    """(base, block stride, block bytes, memory order, info) of a view whose
    first dimension is the block: ValueError unless a block is one
    contiguous region. The order names the dimensions from the slowest
    (N: tokens of the block, H: heads, D: the head's elements)."""
    info = array_info(view, what)
    rest = len(info.shape) - 1
    dims = list(zip(info.shape[1:], info.strides[1:],
                    "NHD" if rest == 3 else "ND"))
    expect = info.itemsize
    for size, stride, _ in sorted(dims, key=lambda d: d[1]):
        if size > 1 and stride != expect:
            raise Unsupported(f"{what}: a block is not one contiguous region "
                              f"(shape {info.shape}, strides {info.strides})")
        expect *= size
    order = "".join(name for _, _, name in
                    sorted(dims, key=lambda d: -d[1]))
    return info.ptr, info.strides[0], expect, order, info


def worker_layout(kv_caches: Dict[str, Any], tag: str, block_size: int,
                  shard: Shard, dtype: str, order: str) -> Tuple[
                      Layout, Dict[str, int]]:
    """A worker's finalized layout from vLLM's registered tensors, and each
    layer name's layer number. `order` is the memory order the scheduler
    expects (ValueError when the tensors have another)."""
    if not kv_caches:
        raise Unsupported("register_kv_caches: no KV cache tensors")
    layers = ordered_layers(list(kv_caches))
    first_of: Dict[int, int] = {}  # storage address → its first layer
    layer_of: Dict[str, int] = {}
    described: List[Tuple[int, List[Tuple[str, Any]]]] = []
    for name, number in layers:
        t = kv_caches[name]
        ptr = array_info(t, name).ptr
        if ptr in first_of:  # shared with an earlier layer
            layer_of[name] = first_of[ptr]
            continue
        first_of[ptr] = number
        layer_of[name] = number
        described.append((number, _components(t, name)))
    mla = len(described[0][1]) == 1
    layout = Layout(tag, block_size, shard=shard)
    pid = layout.add_pool(POOL, replicated_tp=mla, dtype=dtype,
                          memory_layout="" if mla else order)
    for number, comps in described:
        for comp, view in comps:
            base, stride, nbytes, got, info = _block_region(
                view, f"layer {number} {comp}")
            if not mla and got != order:
                raise Unsupported(f"layer {number} {comp}: the KV cache is "
                                  f"{got}, but the scheduler expects "
                                  f"{order} (set the layout with "
                                  f"VLLM_KV_CACHE_LAYOUT on both)")
            layout.add_buffer(pid, comp, number, base, stride, nbytes,
                              info.shape[0], info.mem, info.device,
                              keep=view)
    return layout.finalize(), layer_of


def single_group(kv_cache_config: Any) -> Any:
    """The one KV cache group kvlink's connector takes."""
    groups = list(kv_cache_config.kv_cache_groups)
    if len(groups) != 1:
        raise Unsupported(f"{len(groups)} KV cache groups (a hybrid model): "
                          f"kvlink's vLLM connector takes one; start vLLM "
                          f"with --disable-hybrid-kv-cache-manager")
    return groups[0]


def stage_names(names: Sequence[str], first: Tuple[int, int],
                stage: Tuple[int, int]) -> List[str]:
    """The attention layer names of a pipeline stage holding model layers
    [stage[0], stage[1]), from the names of the first stage (layers
    [first[0], first[1])): each name's layer number moved into the stage.
    vLLM names layers by their model-wide index on every stage."""
    templates = set()
    for name, number in ordered_layers(names):
        m = _LAYER_RE.search(name)
        if m and first[0] <= number < first[1]:
            templates.add(name[:m.start(1)] + "{}" + name[m.end(1):])
    return [t.format(i) for t in sorted(templates)
            for i in range(stage[0], stage[1])]


def scheduler_layout(kv_cache_config: Any, tag: str, block_size: int,
                     shard: Shard, order: str,
                     names: Sequence[str] = ()) -> Layout:
    """The layout the workers of `shard`'s pipeline stage build, by sizes
    only, from vLLM's KV cache config (one KV cache group; `names`: that
    stage's layer names, default the config's)."""
    group = single_group(kv_cache_config)
    spec = group.kv_cache_spec
    names = list(names or group.layer_names)
    numbers = dict(ordered_layers(names))
    shared = set()  # every name of a shared tensor but its first
    for tensor in getattr(kv_cache_config, "kv_cache_tensors", ()) or ():
        sharing = sorted((n for n in getattr(tensor, "shared_by", ()) or ()
                          if n in numbers), key=lambda n: (numbers[n], n))
        shared.update(sharing[1:])
    mla = is_mla_spec(spec)
    layout = Layout(tag, block_size, shard=shard)
    pid = layout.add_pool(POOL, replicated_tp=mla, dtype=spec_dtype(spec),
                          memory_layout="" if mla else order)
    page = int(spec.page_size_bytes)
    comps = [("kv", page)] if mla else [("k", page // 2), ("v", page // 2)]
    for name, number in ordered_layers(names):
        if name in shared:  # described by the first layer sharing it
            continue
        for comp, nbytes in comps:
            layout.add_shape(pid, comp, number, nbytes)
    return layout.finalize()


def spec_dtype(spec: Any) -> str:
    return dtype_name(spec.dtype)


__all__ = ["POOL", "Unsupported", "worker_layout", "scheduler_layout",
           "single_group", "stage_names", "spec_dtype", "layer_number",
           "ordered_layers", "is_mla_spec"]
