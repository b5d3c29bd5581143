# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the few vLLM types kvlink.vllm touches, written from vLLM's
public interface (kv_connector/v1/base.py, config, kv_cache_interface,
v1/request.py), so that the connector's tests run without vLLM.

install() puts them into sys.modules under vLLM's module names unless vLLM
itself is importable (then the real base class is used; the configs and
requests here still describe what the tests run).
"""

from __future__ import annotations

import abc
import enum
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

BASE_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.base"
PARALLEL_MODULE = "vllm.distributed.parallel_state"
UTILS_MODULE = "vllm.distributed.utils"
LAYOUT_MODULE = "vllm.v1.attention.backends.utils"

#: What get_tensor_model_parallel_rank() and get_pp_group().rank_in_group
#: answer (a worker sets them).
TP_RANK = [0]
PP_RANK = [0]
#: What get_kv_cache_layout() answers.
KV_LAYOUT = ["NHD"]


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata(abc.ABC):  # noqa: B024 - empty, as vLLM's
    pass


class KVConnectorBase_V1(abc.ABC):
    """vLLM's connector base: the configs, the bound metadata, defaults
    for the optional methods, and the 7 abstract ones."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole,
                 kv_cache_config: Any = None):
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set")
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> Any:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        return

    def get_finished(self, finished_req_ids: set):
        return None, None

    def get_block_ids_with_load_errors(self) -> set:
        return set()

    def request_finished(self, request: Any, block_ids: List[int]):
        return False, None

    def shutdown(self) -> None:
        return None

    @abc.abstractmethod
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

    @abc.abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None: ...

    @abc.abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer: Any,
                      attn_metadata: Any, **kwargs: Any) -> None: ...

    @abc.abstractmethod
    def wait_for_save(self) -> None: ...

    @abc.abstractmethod
    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int): ...

    @abc.abstractmethod
    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int): ...

    @abc.abstractmethod
    def build_connector_meta(self, scheduler_output: Any): ...


def install() -> Dict[str, Any]:
    """The base class to use: vLLM's when it is importable, else this one,
    registered (with parallel_state and the layout query) under vLLM's
    module names."""
    try:
        base = __import__(BASE_MODULE, fromlist=["_"])
        return {"KVConnectorBase_V1": base.KVConnectorBase_V1,
                "KVConnectorRole": base.KVConnectorRole, "real": True}
    except ImportError:
        pass
    for name in (BASE_MODULE, PARALLEL_MODULE, UTILS_MODULE, LAYOUT_MODULE):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]),
                                   types.ModuleType(".".join(parts[:i])))
    base = sys.modules[BASE_MODULE]
    base.KVConnectorBase_V1 = KVConnectorBase_V1
    base.KVConnectorRole = KVConnectorRole
    base.KVConnectorMetadata = KVConnectorMetadata
    ps = sys.modules[PARALLEL_MODULE]
    ps.get_tensor_model_parallel_rank = lambda: TP_RANK[0]
    ps.get_pp_group = lambda: types.SimpleNamespace(
        rank_in_group=PP_RANK[0])
    sys.modules[UTILS_MODULE].get_pp_indices = get_pp_indices
    sys.modules[LAYOUT_MODULE].get_kv_cache_layout = lambda: KV_LAYOUT[0]
    return {"KVConnectorBase_V1": KVConnectorBase_V1,
            "KVConnectorRole": KVConnectorRole, "real": False}


def get_pp_indices(num_hidden_layers: int, pp_rank: int,
                   pp_size: int):
    """vLLM's split of the model's layers into pipeline stages: (start,
    end) of stage pp_rank. Each stage gets num_hidden_layers // pp_size;
    the rest go one each to the stages before the last, from the
    second-to-last backwards."""
    per = [num_hidden_layers // pp_size] * pp_size
    for i in range(num_hidden_layers % pp_size):
        per[pp_size - 2 - i] += 1
    start = sum(per[:pp_rank])
    return start, start + per[pp_rank]


# ------------------------------------------------------------- configs

@dataclass
class KVTransferConfig:
    kv_connector: str = "KvlinkConnector"
    kv_connector_module_path: str = "kvlink.vllm"
    kv_role: str = "kv_both"
    kv_connector_extra_config: Dict[str, Any] = field(default_factory=dict)
    kv_load_failure_policy: str = "recompute"


@dataclass
class CacheConfig:
    block_size: int = 16


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass
class HFConfig:
    num_hidden_layers: int = 32


@dataclass
class ModelConfig:
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    hf_config: HFConfig = field(default_factory=HFConfig)


@dataclass
class VllmConfig:
    kv_transfer_config: KVTransferConfig
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    model_config: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class FullAttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: Any

    @property
    def page_size_bytes(self) -> int:
        import numpy as np
        return 2 * self.block_size * self.num_kv_heads * self.head_size * \
            np.dtype(self.dtype).itemsize


@dataclass
class MLAAttentionSpec(FullAttentionSpec):
    """One latent per token (vLLM's MLAAttentionSpec is a
    FullAttentionSpec too)."""

    @property
    def page_size_bytes(self) -> int:
        import numpy as np
        return self.block_size * self.head_size * np.dtype(self.dtype).itemsize


@dataclass
class KVCacheGroupSpec:
    layer_names: List[str]
    kv_cache_spec: Any


@dataclass
class KVCacheTensor:
    size: int
    shared_by: List[str]


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: List[KVCacheTensor]
    kv_cache_groups: List[KVCacheGroupSpec]


# ------------------------------------------------------------- requests

@dataclass
class LoRARequest:
    lora_name: str


class Request:
    """The fields of vLLM's Request the connector reads."""

    def __init__(self, request_id: str, prompt_token_ids: List[int],
                 cache_salt: Optional[str] = None,
                 lora_request: Optional[LoRARequest] = None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self._all_token_ids = list(prompt_token_ids)
        self.num_computed_tokens = 0
        self.cache_salt = cache_salt
        self.lora_request = lora_request
        self.mm_features: List[Any] = []

    @property
    def all_token_ids(self) -> List[int]:
        return list(self._all_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    def append_output_token_ids(self, tok: int) -> None:
        self._all_token_ids.append(tok)


class KVCacheBlocks:
    """A request's blocks, one group."""

    def __init__(self, block_ids: List[int]):
        self._ids = list(block_ids)

    def get_block_ids(self):
        return (list(self._ids),)
