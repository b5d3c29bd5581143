# SPDX-License-Identifier: Apache-2.0
"""kvlink as a vLLM KV connector (the v1 API).

Start vLLM with::

    --kv-transfer-config '{"kv_connector": "KvlinkConnector",
        "kv_connector_module_path": "kvlink.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"store": "redis://10.0.0.1:6379"}}'

vLLM builds the connector twice: in its scheduler (role SCHEDULER) and in
every GPU worker (role WORKER), which are other processes.

- **Scheduler**: a request's pages are kvlink page hashes of its tokens
  (one page per vLLM block; LoRA adapter, cache salt and multimodal inputs
  put them in a namespace of their own). ``get_num_new_matched_tokens``
  asks a :class:`~kvlink.Prober` which prefix every worker (every
  tensor-parallel rank of every pipeline stage) can restore, from the
  store alone (the scheduler has no KV tensors), and leaves the last token
  to compute, as vLLM requires. The loads and saves it decides
  travel to the workers in :class:`KvlinkConnectorMetadata`.
- **Workers**: ``register_kv_caches`` describes vLLM's tensors
  (FlashAttention, FlashInfer, MLA) as a layout; ``start_load_kv`` starts a
  step's loads as one batch after an event on the current stream;
  ``wait_for_layer_load`` is a wait enqueued on that stream (CPU waits for
  host tensors); loads that fail report exactly the blocks past the last
  valid page through ``get_block_ids_with_load_errors``, for vLLM to
  recompute (or fail, by its ``kv_load_failure_policy``).
- **Saves**: when a request finishes, its computed full blocks are stored
  in the background (``request_finished`` keeps the blocks until then;
  ``get_finished`` reports the save done on every worker).
- **Roles**: ``kv_producer`` (a prefill instance) saves only,
  ``kv_consumer`` (a decode instance) loads only, ``kv_both`` both: the
  store is how prefill hands pages to decode.

Importing this module needs neither vLLM nor torch; ``KvlinkConnector`` is
built, as a subclass of vLLM's ``KVConnectorBase_V1``, when first asked
for. docs/vllm.md has the whole mapping.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from . import _vllm_layout as vl
from ._engine import EngineClass, StoreLink, Warnings, check_numbers, \
    config, model_tag, stream_event
from .errors import KvlinkError
from .hashes import hash_pages, namespace_seed
from .layout import MemKind, Shard
from .linker import GpuCopy, Linker
from .prober import Prober

log = logging.getLogger("kvlink.vllm")

_BASE_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.base"

#: kv_connector_extra_config keys and their defaults.
DEFAULTS: Dict[str, Any] = {
    "store": "mem:",          # a kvlink store URI (shared by the processes)
    "model_tag": None,        # default: the model's name
    "kv_layout": None,        # NHD or HND; default: vLLM's
    "load_timeout_s": 60.0,   # a load longer than this fails its blocks
    "reconnect_s": 10.0,      # retry a store that failed to open
    "gpu_copy": "auto",       # a kvlink.GpuCopy name: auto, kernel, dma
    "gpu_staging": 0,         # bytes of its GPU staging ring (0: 64 MiB)
}

SCHEDULER, WORKER = 0, 1  # vLLM's KVConnectorRole values


@dataclass
class Transfer:
    """One request's pages (32-byte hashes, concatenated) and the vLLM
    blocks that hold them, in order."""
    req_id: str
    pages: bytes
    block_ids: List[int]


@dataclass
class KvlinkConnectorMetadata:
    """What the scheduler sends the workers each step (picklable)."""
    loads: List[Transfer] = field(default_factory=list)
    saves: List[Transfer] = field(default_factory=list)


def _role_value(role: Any) -> int:
    return int(getattr(role, "value", role))


def _kv_layout(vllm_config: Any, cfg: Dict[str, Any]) -> str:
    """The memory order of the workers' KV caches, as both sides see it:
    the extra config's kv_layout, else vLLM's get_kv_cache_layout()."""
    if cfg["kv_layout"]:
        return str(cfg["kv_layout"]).upper()
    try:
        from vllm.v1.attention.backends.utils import get_kv_cache_layout
        return str(get_kv_cache_layout()).upper()
    except ImportError:
        return "NHD"


def _namespace(request: Any) -> Optional[bytes]:
    """The namespace of a request's pages: its LoRA adapter, cache salt
    and multimodal inputs (whose placeholder tokens alone do not name the
    KV they make), or None."""
    salts = []
    lora = getattr(request, "lora_request", None)
    if lora is not None:
        salts.append(f"lora:{getattr(lora, 'lora_name', lora)}")
    salt = getattr(request, "cache_salt", None)
    if salt:
        salts.append(f"salt:{salt}")
    mm = getattr(request, "mm_features", None) or \
        getattr(request, "mm_hashes", None)
    if mm:
        ids = [str(getattr(f, "identifier", f)) for f in mm]
        salts.append("mm:" + ",".join(ids))
    return namespace_seed("vllm", *salts) if salts else None


class _KvlinkConnector:
    """The implementation; :data:`KvlinkConnector` adds vLLM's base class
    (which keeps the bound metadata)."""

    if TYPE_CHECKING:  # from vLLM's KVConnectorBase_V1, mixed in later
        def _get_connector_metadata(self) -> Any: ...

    def __init__(self, vllm_config: Any, role: Any,
                 kv_cache_config: Any = None):
        # vLLM's base keeps the configs and the bound metadata.
        super().__init__(vllm_config, role,  # type: ignore[call-arg]
                         kv_cache_config)
        tc = vllm_config.kv_transfer_config
        self._cfg = config(getattr(tc, "kv_connector_extra_config", None),
                           DEFAULTS, "kvlink.vllm: kv_connector_extra_config",
                           "vllm")
        check_numbers(self._cfg, ("load_timeout_s", "reconnect_s",
                                  "gpu_staging"),
                      "kvlink.vllm: kv_connector_extra_config")
        self._cfg["gpu_copy"] = GpuCopy.of(self._cfg["gpu_copy"])
        if kv_cache_config is None:
            raise vl.Unsupported("kvlink.vllm needs the KV cache config "
                                 "(vLLM passes it to connectors since "
                                 "late 2025)")
        kv_role = getattr(tc, "kv_role", None) or "kv_both"
        self.saves = kv_role in ("kv_producer", "kv_both")
        self.loads = kv_role in ("kv_consumer", "kv_both")
        par = vllm_config.parallel_config
        self.tp_size = int(getattr(par, "tensor_parallel_size", 1) or 1)
        self.pp_size = int(getattr(par, "pipeline_parallel_size", 1) or 1)
        self._vllm_config = vllm_config
        self.block_size = int(vllm_config.cache_config.block_size)
        self.tag = model_tag(getattr(vllm_config.model_config, "model", None),
                             self._cfg["model_tag"], "vllm")
        self.order = _kv_layout(vllm_config, self._cfg)
        self._kv_cache_config = kv_cache_config
        self._side = _role_value(role)
        self.stats: Dict[str, int] = collections.Counter()
        self._warn = Warnings(log)
        if self._side == SCHEDULER:
            self._init_scheduler()
        else:
            self._init_worker()

    # ------------------------------------------------------- scheduler

    def _stage_layouts(self) -> List[Any]:
        """One layout per pipeline stage, by sizes only. The scheduler's KV
        cache config names the first stage's layers only; the others'
        come from vLLM's split of the model's layers (get_pp_indices)."""
        shard = Shard(tp_size=self.tp_size, pp_size=self.pp_size)
        layouts = [vl.scheduler_layout(self._kv_cache_config, self.tag,
                                       self.block_size, shard, self.order)]
        if self.pp_size == 1:
            return layouts
        try:
            from vllm.distributed.utils import get_pp_indices
        except ImportError as e:
            raise vl.Unsupported(f"kvlink.vllm: pipeline parallelism needs "
                                 f"vLLM's get_pp_indices: {e}") from e
        mc = self._vllm_config.model_config
        hf = getattr(mc, "hf_text_config", None) or mc.hf_config
        n = int(hf.num_hidden_layers)
        names = vl.single_group(self._kv_cache_config).layer_names
        first = get_pp_indices(n, 0, self.pp_size)
        for p in range(1, self.pp_size):
            stage = Shard(tp_size=self.tp_size, pp_rank=p,
                          pp_size=self.pp_size)
            layouts.append(vl.scheduler_layout(
                self._kv_cache_config, self.tag, self.block_size, stage,
                self.order, vl.stage_names(
                    names, first, get_pp_indices(n, p, self.pp_size))))
        return layouts

    def _init_scheduler(self) -> None:
        layouts = self._stage_layouts()
        self._layout = layouts[0]
        self._link = StoreLink(self._cfg["store"], self._cfg["reconnect_s"],
                               lambda store: Prober(store, layouts),
                               self._warn, "vLLM")
        self._link.get(starting=True)
        self._hits: Dict[str, Tuple[bytes, int]] = {}  # req → pages, local
        self._pending = KvlinkConnectorMetadata()

    def _request_pages(self, request: Any, n_blocks: int) -> bytes:
        tokens = list(request.all_token_ids)[:n_blocks * self.block_size]
        return b"".join(hash_pages(tokens, self.block_size,
                                   prior=_namespace(request)))

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int
                                   ) -> Tuple[Optional[int], bool]:
        """Tokens past num_computed_tokens that every worker can load from
        the store now, in whole blocks, leaving the last token to compute;
        loads are synchronous (False)."""
        self._hits.pop(request.request_id, None)
        if not self.loads:
            return 0, False
        # Whole blocks only, and never the last token.
        usable = (int(request.num_tokens) - 1) // self.block_size
        if usable * self.block_size <= num_computed_tokens:
            return 0, False
        pr = self._link.get()
        if pr is None:
            return 0, False
        pages = self._request_pages(request, usable)
        try:
            hit = pr.lookup(pages)
        except KvlinkError as e:
            self.stats["lookup_errors"] += 1
            self._warn("lookup", "kvlink: lookup of %s failed, computing it "
                       "instead: %s", request.request_id, e)
            return 0, False
        self.stats["lookups"] += 1
        ext = hit * self.block_size - num_computed_tokens
        if ext <= 0:
            return 0, False
        self._hits[request.request_id] = (pages, num_computed_tokens)
        self.stats["hit_blocks"] += hit
        return ext, False

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """Queues the load of the blocks vLLM allocated for the external
        tokens (after its own prefix hit)."""
        hit = self._hits.pop(request.request_id, None)
        if not num_external_tokens or hit is None:
            return
        pages, local = hit
        bs = self.block_size
        first, n = local // bs, num_external_tokens // bs
        block_ids = list(blocks.get_block_ids()[0])[first:first + n]
        self._pending.loads.append(Transfer(
            request.request_id, pages[32 * first:32 * (first + n)],
            block_ids))

    def build_connector_meta(self, scheduler_output: Any
                             ) -> KvlinkConnectorMetadata:
        meta, self._pending = self._pending, KvlinkConnectorMetadata()
        return meta

    def request_finished(self, request: Any, block_ids: List[int]
                         ) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """Saves the request's computed full blocks: True keeps them
        allocated until every worker reports the save done."""
        self._hits.pop(request.request_id, None)
        if not self.saves or self._link.get() is None:
            return False, None
        n = min(len(block_ids),
                int(request.num_computed_tokens) // self.block_size)
        if n <= 0:
            return False, None
        self._pending.saves.append(Transfer(
            request.request_id, self._request_pages(request, n),
            list(block_ids[:n])))
        return True, None

    # ---------------------------------------------------------- worker

    def _init_worker(self) -> None:
        self._linker: Optional[StoreLink] = None
        self._layer_of: Dict[str, int] = {}
        self._ids = 0
        self._batch: Optional[int] = None
        self._waited: Set[int] = set()
        self._loading: Dict[int, Transfer] = {}   # id → this step's load
        self._saving: Dict[int, Tuple[str, Any]] = {}  # id → req, event
        self._sent: Set[str] = set()
        self._invalid: Set[int] = set()
        self._cuda = False

    def _shard(self) -> Shard:
        """This worker's tensor- and pipeline-parallel ranks (vLLM's
        parallel state; a single rank without it)."""
        try:
            import vllm.distributed.parallel_state as ps
        except ImportError:
            return Shard(tp_size=self.tp_size, pp_size=self.pp_size)
        pp = ps.get_pp_group().rank_in_group if self.pp_size > 1 else 0
        return Shard(tp_rank=int(ps.get_tensor_model_parallel_rank()),
                     tp_size=self.tp_size, pp_rank=int(pp),
                     pp_size=self.pp_size)

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        spec = vl.single_group(self._kv_cache_config).kv_cache_spec
        layout, self._layer_of = vl.worker_layout(
            kv_caches, self.tag, self.block_size, self._shard(),
            vl.spec_dtype(spec), self.order)
        self._layout = layout
        from ._buffers import array_info
        self._cuda = any(array_info(t).mem == MemKind.CUDA
                         for t in kv_caches.values())
        self._linker = StoreLink(self._cfg["store"], self._cfg["reconnect_s"],
                                 lambda store: Linker(
                                     layout, store,
                                     gpu_copy=self._cfg["gpu_copy"],
                                     gpu_staging=int(
                                         self._cfg["gpu_staging"])),
                                 self._warn, "vLLM")
        self._linker.get(starting=True)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _fail_blocks(self, t: Transfer, valid: int = 0) -> None:
        self._invalid.update(t.block_ids[valid:])
        self.stats["failed_blocks"] += len(t.block_ids) - valid

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Starts this step's loads as one batch, after the work queued so
        far on the current stream."""
        meta = self._get_connector_metadata()
        self._batch = None
        self._waited = set()
        if not meta.loads:
            return
        lk = self._linker.get() if self._linker is not None else None
        for t in meta.loads:
            if lk is None:  # the store cannot be reached: nothing loads
                self._fail_blocks(t)
                continue
            rid = self._next_id()
            try:
                lk.load(rid, t.pages, t.block_ids)
            except KvlinkError as e:
                self._warn("load", "kvlink: load of %s refused: %s",
                           t.req_id, e)
                self._fail_blocks(t)
                continue
            self._loading[rid] = t
        if self._loading and lk is not None:
            self._batch = lk.start(event=stream_event(self._cuda))
            self.stats["loads"] += len(self._loading)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Orders the current stream (the CPU, for host tensors) after the
        load of this layer. A failed load is not raised: its blocks are
        reported by get_block_ids_with_load_errors."""
        if self._batch is None:
            return
        layer = self._layer_of.get(layer_name)
        if layer is None or layer in self._waited:
            return
        self._waited.add(layer)
        lk = self._linker.obj if self._linker is not None else None
        if lk is None:
            return
        timeout = float(self._cfg["load_timeout_s"])
        try:
            if self._cuda:
                lk.wait_stream(self._batch, layer, timeout=timeout)
            else:
                lk.wait(self._batch, layer, timeout=timeout)
        except KvlinkError:
            pass  # the completions say which blocks are not valid

    def save_kv_layer(self, layer_name: str, kv_layer: Any,
                      attn_metadata: Any, **kwargs: Any) -> None:
        """Nothing: a request's blocks are saved when it finishes."""

    def wait_for_save(self) -> None:
        """Queues the saves of finished requests (their blocks stay
        allocated until get_finished reports them)."""
        meta = self._get_connector_metadata()
        lk = self._linker.get() if self._linker is not None else None
        for t in meta.saves:
            if lk is None:
                self._sent.add(t.req_id)  # nothing to wait for
                continue
            sid = self._next_id()
            event = stream_event(self._cuda)
            try:
                lk.offload(sid, t.pages, t.block_ids, event=event)
            except KvlinkError as e:
                self._warn("save", "kvlink: save of %s refused: %s",
                           t.req_id, e)
                self._sent.add(t.req_id)
                continue
            self._saving[sid] = (t.req_id, event)
            self.stats["saves"] += 1

    def _collect(self, wait_loads: bool) -> None:
        """Completions: finished saves, and this step's loads (waited for
        when wait_loads: a load's outcome belongs to its step)."""
        lk = self._linker.obj if self._linker is not None else None
        if lk is None:
            return
        deadline = time.monotonic() + float(self._cfg["load_timeout_s"])
        while True:
            for c in lk.poll(256):
                if c.id in self._loading:
                    t = self._loading.pop(c.id)
                    if not c.ok:
                        self._fail_blocks(t, c.valid_pages)
                elif c.id in self._saving:
                    req_id, _ = self._saving.pop(c.id)
                    self._sent.add(req_id)
                    if not c.ok:
                        self.stats["failed_saves"] += 1
            if not (wait_loads and self._loading):
                return
            if time.monotonic() > deadline:
                for t in self._loading.values():
                    self._fail_blocks(t)
                self._loading.clear()
                return
            time.sleep(0.0005)

    def get_finished(self, finished_req_ids: Set[str]
                     ) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """(the requests whose saves are done, None: loads are
        synchronous)."""
        self._collect(wait_loads=True)
        sent, self._sent = self._sent, set()
        return (sent or None), None

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """The blocks of this step's loads that do not hold their pages:
        each failed load's blocks from its first invalid page on."""
        self._collect(wait_loads=True)
        bad, self._invalid = self._invalid, set()
        return bad

    def handle_preemptions(self, preempted: Any) -> None:
        """Nothing to fence: loads finish within their step, and saves read
        only blocks vLLM keeps for them."""

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Any) -> bool:
        """True: wait_for_layer_load runs in Python, which full CUDA graphs
        would skip."""
        return True

    def shutdown(self) -> None:
        for link in (getattr(self, "_link", None),
                     getattr(self, "_linker", None)):
            if link is not None:
                link.close()


_class = EngineClass(__name__, "KvlinkConnector", _KvlinkConnector,
                     _BASE_MODULE + ".KVConnectorBase_V1", "vLLM")


def __getattr__(name: str) -> Any:
    """``KvlinkConnector``: the connector class, built on first use as a
    subclass of vLLM's KVConnectorBase_V1 (so importing this module needs
    no vLLM)."""
    return _class.get(name)


# KvlinkConnector is left out: ``import *`` must work without vLLM.
__all__ = ["KvlinkConnectorMetadata", "Transfer", "DEFAULTS"]
