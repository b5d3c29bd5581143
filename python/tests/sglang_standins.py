# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the few SGLang types kvlink.sglang touches, written from
SGLang's public interface (unified_cache_linker.py, hicache_storage.py,
memory_pool.py), so that the linker's tests run without SGLang.

install() puts them into sys.modules under SGLang's module names unless
SGLang itself is importable (then the real types are used). The pools hold
numpy arrays on the CPU, or torch tensors on a CUDA device, shaped as
SGLang's: one array per layer, ``[size + page_size, heads, head_dim]`` for
MHA (token 0's page is SGLang's padding), ``[size + page_size, 1, latent]``
for MLA; each accessor waits on the registered layer counter with the
pipeline-stage-local layer, as SGLang's pools do.
"""

from __future__ import annotations

import abc
import enum
import sys
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

ABC_MODULE = "sglang.srt.mem_cache.unified_cache.unified_cache_linker"
STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"


class PoolName(str, enum.Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, enum.Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: PoolName
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


class ComponentType(int, enum.Enum):
    FULL = 0
    SWA = 1
    MAMBA = 2
    C128 = 3
    DRAFT = 4

    def __str__(self) -> str:
        return self.name.lower()


class UnifiedCacheLinker(abc.ABC):
    """SGLang's abstract linker: the 11 methods its factory requires."""

    layer_done_counter: object

    @abc.abstractmethod
    def lookup(self, rid: str, transfers: list) -> list: ...

    @abc.abstractmethod
    def load(self, rid: str, transfers: list) -> bool: ...

    @abc.abstractmethod
    def start_layer_wise_loading(self) -> int: ...

    @abc.abstractmethod
    def cancel_queued_load(self, rid: str) -> bool: ...

    @abc.abstractmethod
    def num_completed_loads(self) -> int: ...

    @abc.abstractmethod
    def pop_completed_load(self) -> list: ...

    @abc.abstractmethod
    def offload(self, transfers: list) -> bool: ...

    @abc.abstractmethod
    def num_completed_offloads(self) -> int: ...

    @abc.abstractmethod
    def pop_completed_offload(self) -> bool: ...

    @abc.abstractmethod
    def reset(self) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...


def install() -> Dict[str, Any]:
    """The SGLang types to use: the real ones when SGLang is importable,
    else these, registered under SGLang's module names."""
    try:
        abc_mod = __import__(ABC_MODULE, fromlist=["_"])
        st = __import__(STORAGE_MODULE, fromlist=["_"])
        return {"UnifiedCacheLinker": abc_mod.UnifiedCacheLinker,
                "PoolName": st.PoolName, "PoolHitPolicy": st.PoolHitPolicy,
                "PoolTransfer": st.PoolTransfer, "real": True}
    except ImportError:
        pass
    names = ["sglang", "sglang.srt", "sglang.srt.mem_cache",
             "sglang.srt.mem_cache.unified_cache", ABC_MODULE, STORAGE_MODULE]
    for name in names:
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[ABC_MODULE].UnifiedCacheLinker = UnifiedCacheLinker
    st = sys.modules[STORAGE_MODULE]
    st.PoolName, st.PoolHitPolicy, st.PoolTransfer = \
        PoolName, PoolHitPolicy, PoolTransfer
    return {"UnifiedCacheLinker": UnifiedCacheLinker, "PoolName": PoolName,
            "PoolHitPolicy": PoolHitPolicy, "PoolTransfer": PoolTransfer,
            "real": False}


# ------------------------------------------------------------- the pools

class _Pool:
    """What SGLang's KVCache base gives: size, page_size, dtype, layers,
    and the layer counter the linker registers."""

    def __init__(self, size: int, page_size: int, dtype: Any,
                 layer_num: int, start_layer: int = 0):
        self.size, self.page_size, self.dtype = size, page_size, dtype
        self.layer_num, self.start_layer = layer_num, start_layer
        self.end_layer = start_layer + layer_num
        self.layer_transfer_counter = None

    def register_layer_transfer_counter(self, counter: Any) -> None:
        self.layer_transfer_counter = counter

    def _wait(self, layer_id: int) -> None:
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(layer_id - self.start_layer)


class MHATokenToKVPool(_Pool):
    """``kv_cache_layout`` "nhd" (rows are tokens) or "hnd" (tensors are
    [pages, heads, page_size, head_dim])."""

    def __init__(self, size, page_size, dtype, head_num, head_dim, layer_num,
                 alloc, start_layer=0, kv_cache_layout="nhd"):
        super().__init__(size, page_size, dtype, layer_num, start_layer)
        self.head_num, self.head_dim, self.v_head_dim = \
            head_num, head_dim, head_dim
        self.kv_cache_layout = kv_cache_layout
        shape = (size + page_size, head_num, head_dim)
        if kv_cache_layout == "hnd":
            shape = ((size + page_size) // page_size, head_num, page_size,
                     head_dim)
        self.k_buffer = [alloc(shape) for _ in range(layer_num)]
        self.v_buffer = [alloc(shape) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.k_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.v_buffer[layer_id - self.start_layer]


class MLATokenToKVPool(_Pool):
    def __init__(self, size, page_size, dtype, kv_lora_rank,
                 qk_rope_head_dim, layer_num, alloc, start_layer=0):
        super().__init__(size, page_size, dtype, layer_num, start_layer)
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, \
            qk_rope_head_dim
        shape = (size + page_size, 1, kv_lora_rank + qk_rope_head_dim)
        self.kv_buffer = [alloc(shape) for _ in range(layer_num)]

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.kv_buffer[layer_id - self.start_layer]


class DSATokenToKVPool(MLATokenToKVPool):
    """MLA with the sparse-attention indexer: one row of keys and scales
    per page."""

    def __init__(self, size, page_size, dtype, kv_lora_rank,
                 qk_rope_head_dim, index_bytes, layer_num, alloc,
                 start_layer=0):
        super().__init__(size, page_size, dtype, kv_lora_rank,
                         qk_rope_head_dim, layer_num, alloc, start_layer)
        rows = (size + page_size) // page_size
        self.index_k_with_scale_buffer = [
            alloc((rows, index_bytes), "uint8") for _ in range(layer_num)]

    def get_index_k_with_scale_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.index_k_with_scale_buffer[layer_id - self.start_layer]


class SWAKVPool(_Pool):
    """A sliding-window hybrid: full-attention layers in one MHA pool,
    window layers in another, ``layers_mapping`` from the model's layer id
    to (index in its pool, is a window layer). SWA indices are the full
    indices translated by ``full_to_swa_index_mapping``."""

    def __init__(self, size, size_swa, page_size, dtype, head_num, head_dim,
                 swa_layers: List[int], layer_num, alloc, start_layer=0):
        # SGLang's SWAKVPool keeps start_layer 0: its layers_mapping and
        # its waits use the model's layer ids.
        super().__init__(size, page_size, dtype, layer_num, 0)
        full = [i for i in range(layer_num) if i not in swa_layers]
        self.full_kv_pool = MHATokenToKVPool(size, page_size, dtype,
                                             head_num, head_dim, len(full),
                                             alloc)
        self.swa_kv_pool = MHATokenToKVPool(size_swa, page_size, dtype,
                                            head_num, head_dim,
                                            len(swa_layers), alloc)
        self.layers_mapping = {}
        for j, layer in enumerate(full):
            self.layers_mapping[start_layer + layer] = (j, False)
        for j, layer in enumerate(swa_layers):
            self.layers_mapping[start_layer + layer] = (j, True)

    def buffer(self, layer_id: int, kv: str):
        self._wait(layer_id)
        idx, is_swa = self.layers_mapping[layer_id]
        pool = self.swa_kv_pool if is_swa else self.full_kv_pool
        return (pool.k_buffer if kv == "k" else pool.v_buffer)[idx]


class TokenAllocator:
    """A paged allocator over a pool: token indices of whole pages, page 0
    kept back (SGLang's padding slot). A sliding-window hybrid has a second
    index space for its window layers (SGLang's swa_attn_allocator); it
    hands pages out from the top, so that its slots differ from the full
    pool's."""

    def __init__(self, kvcache: Any, pages: int):
        self._kvcache = kvcache
        self.page_size = kvcache.page_size
        self.free_pages = list(range(1, pages))
        self.free_swa_pages = list(range(pages - 1, 0, -1))

    def get_kvcache(self):
        return self._kvcache

    def alloc_pages(self, n: int, swa: bool = False) -> List[int]:
        free = self.free_swa_pages if swa else self.free_pages
        if n > len(free):
            raise MemoryError("stand-in allocator: out of pages")
        got = free[:n]
        del free[:n]
        return got


@dataclass
class CacheInitParams:
    """The fields of SGLang's CacheInitParams the linker reads."""
    token_to_kv_pool_allocator: Any
    page_size: int
    tp_cache_group: Any = None
    attn_tp_cache_group: Any = None
    attn_cp_cache_group: Any = None
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    sliding_window_size: Optional[int] = None
    is_eagle: bool = False
    mtp_draft_device_pools: tuple = ()
    req_to_token_pool: Any = None


@dataclass
class ServerArgs:
    model_path: str = "meta-llama/Llama-3.1-8B-Instruct"


class Group:
    """A process group as the linker sees one: rank() and size()."""

    def __init__(self, rank: int, size: int):
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size
