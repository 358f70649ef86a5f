"""A vLLM V1 KV connector that splices a stored chunk into the engine's paged KV cache (paper §6, Fig. 12).

The connector follows vLLM's out-of-tree connector API, ``KVConnectorBase_V1`` in
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` (read in vllm-project/vllm, the installed 0.32 CPU
build and the 0.34 wheel: the same constructor and seven abstract methods; 0.34's optional hooks are answered
explicitly, :meth:`KameraConnector.supports_lookahead_block_hashes`), and the shape of its reference connector
``.../v1/example_connector.py``:

- **scheduler side** — :meth:`KameraConnector.get_num_new_matched_tokens` claims the first ``n`` prompt
  tokens as externally cached (``n`` = the request's segments, below), :meth:`update_state_after_alloc`
  notes the request, :meth:`build_connector_meta` hands its block ids to the worker. vLLM then computes
  only the tokens after the claim (``RequestOutput.num_cached_tokens`` reports ``n``).
- **worker side** (vLLM 0.32 hands every backend's per-layer cache as a block-major ``[blocks, heads,
  block_size, ·]`` view) — :meth:`start_load_kv` composes the claimed KV from the store with kamera's operator
  (:func:`kamera.core.relocate` for R(δ), :meth:`kamera.core.Patch.apply` for R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ)
  and writes it through the attention backend's own scatter, ``layer.impl.do_kv_cache_update`` (the CPU
  backend's block interior is ``[kv_heads, block_size, 2·head_dim]`` with an instruction-set-dependent
  order, so nothing here writes cache memory by hand). :meth:`save_kv_layer` captures a request's KV
  (vLLM's own prefill, or what a splice wrote) into the store.

What is prefilled by whom: a connector can only claim a *prefix* of the prompt, so the whole
[prefix · A · B] range is injected; prefix and A are injected **exactly** (the engine's own KV of them,
captured from vLLM's prefill of the same tokens and written back bit for bit), B is the reconstructed
chunk, and only the query runs in vLLM after the splice. Prefix caching must be off (an approximate
chunk must never be stored as exact): :class:`EngineSession` builds the engine that way and the connector
refuses to claim tokens vLLM already computed.

A request names what to splice in ``SamplingParams(extra_args={"kv_transfer_params": {"kamera": …}})``:

- ``{"capture": KEY}`` — after the forward, store every prompt token's KV as page ``KEY``;
- ``{"segments": [SEG, …]}`` — claim the segments, laid end to end from position 0; each
  ``SEG = {"key", "span": [a, b], "start", "rotate": True, "patch": None, "rank": None}`` takes tokens
  ``[a, b)`` of page ``key`` and places them at ``start``: re-rotated by δ = start − their stored position
  (``rotate: false`` places them unrotated: the paper's "unrotated" arm), plus the stored patch ``patch``
  at rank ``rank`` (None = full rank, 0 = none: blind). Both keys may be given on one request.

Families: GQA / MHA text decoders with default 1-D RoPE (tested on a tiny Qwen2) and DeepSeek-V2's MLA
(tested on a tiny DeepSeek-V2 on the ``CPU_MLA`` backend): its page is the latent row ``[kv_c_normed ·
k_pe]`` per token, R(δ) turns k_pe alone and the patch corrects both. vLLM's CPU backend also serves
Qwen2.5-VL, but this connector does not place the M-RoPE positions of cached image tokens yet:
:func:`~kamera.engine.family.preflight` refuses it (and other MLA families) with a one-line error instead of
splicing wrong KV.
"""

from __future__ import annotations

import gc
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from kamera.core import ChannelSpec, ChunkKV
from kamera.engine.family import BLOCK_SIZE, EngineError, attention, channels, mrope, platform_kernels
from kamera.engine.plan import PARAMS, Segment, check_plan, compose, media_of, segments
from kamera.engine.session import Output, StoreSession
from kamera.engine.store import StoreError, record, save_page

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

_LAYER = re.compile(r"layers\.(\d+)\.")


# ----- the cache layout, learned through the engine's own write -----------------------------------
def write_kv(layer: torch.nn.Module, chans: tuple[torch.Tensor, torch.Tensor], cache: torch.Tensor,
             slots: torch.Tensor) -> None:
    """Write one layer's two channels for the tokens at ``slots`` through the attention backend's own scatter.

    GQA / MHA (``Attention``, ``vllm/model_executor/layers/attention/attention.py``): K and V
    [n, kv_heads, head_dim] go to ``impl.do_kv_cache_update(layer, k, v, cache, slots)`` (CPU: ``cpu_attn.py``).
    MLA (``MLAAttention``, ``.../attention/mla_attention.py``, whose ``update_kv_cache`` makes the same call):
    the latent [n, kv_lora_rank] and k_pe [n, 1, rope_dim] go to ``impl.do_kv_cache_update(kv_c_normed, k_pe,
    cache, slots, kv_cache_dtype, k_scale)``, which on CPU (``vllm/v1/attention/backends/mla/cpu_mla.py``)
    fills the row ``[latent · k_pe]`` of each slot in the ``[blocks, block_size, kv_lora_rank + rope_dim]`` cache.
    """
    a, b = (t.to(cache.device, cache.dtype) for t in chans)
    if getattr(layer, "kv_lora_rank", None) is not None:
        layer.impl.do_kv_cache_update(a.reshape(a.shape[0], -1), b, cache, slots, layer.kv_cache_dtype, layer._k_scale)
    else:
        layer.impl.do_kv_cache_update(layer, a, b, cache, slots)


def learn_layout(layer: torch.nn.Module, kv_cache: torch.Tensor, block: int, specs: tuple[ChannelSpec, ...],
                 block_size: int) -> torch.Tensor:
    """Where each element of one block's two channels lands in the cache: the flat block index → source element.

    The backend's scatter (:func:`write_kv`) writes integer codes (< 256, exact in every cache dtype, two
    passes) for both channels [block_size, heads, dim] into ``block``; reading the block back gives the
    permutation, whatever order the backend and instruction set use. The caller overwrites the block afterwards.
    """
    sizes = [block_size * s.width for s in specs]
    if kv_cache[block].numel() != sum(sizes):
        raise EngineError(f"a cache block holds {kv_cache[block].numel()} elements, not {block_size} tokens of "
                          f"{' + '.join(f'{s.name} {s.width}' for s in specs)}")
    codes = torch.arange(sum(sizes), dtype=torch.int64)
    slots = block * block_size + torch.arange(block_size, device=kv_cache.device)
    got = torch.zeros(kv_cache[block].numel(), dtype=torch.int64)
    for scale in (1, 256):
        parts = ((codes // scale) % 256).split(sizes)
        write_kv(layer, tuple(p.view(block_size, s.heads, s.dim) for p, s in zip(parts, specs, strict=True)),
                 kv_cache, slots)
        got += scale * kv_cache[block].reshape(-1).to(torch.float64).round().to(torch.int64).cpu()
    if not torch.equal(torch.sort(got).values, codes):
        raise EngineError(
            "the attention backend's cache block is not a permutation of its channels; cannot read it back"
        )
    return got


def read_block_kv(
    kv_cache: torch.Tensor, layout: torch.Tensor, block_ids: list[int], n: int, specs: tuple[ChannelSpec, ...]
) -> tuple[torch.Tensor, ...]:
    """The two channels [n, heads, dim] of the first ``n`` tokens held in ``block_ids`` (cache dtype, on CPU)."""
    flat = kv_cache[torch.as_tensor(block_ids, device=kv_cache.device)].reshape(len(block_ids), -1).cpu()
    src = torch.empty_like(flat)
    src[:, layout] = flat
    size = flat.shape[1] // sum(s.width for s in specs)
    parts = src.split([size * s.width for s in specs], dim=1)
    return tuple(p.reshape(-1, s.heads, s.dim)[:n].clone() for p, s in zip(parts, specs, strict=True))


def slot_mapping(block_ids: list[int], block_size: int, n: int, device: torch.device) -> torch.Tensor:
    """The cache slot of each of the first ``n`` tokens of a request holding ``block_ids``."""
    t = torch.arange(n)
    return (torch.as_tensor(block_ids)[t // block_size] * block_size + t % block_size).to(device)


# ----- the connector --------------------------------------------------------------------------------
@dataclass
class _Work:
    """One request's work this step: a splice to load and/or a capture to store, with the prompt's positions
    ([n], or [3, n] under M-RoPE, as vLLM places them), its media and how many encoder inputs vLLM scheduled."""

    req_id: str
    prompt: list[int]
    block_ids: list[int]
    segments: list[Segment]
    capture: str | None
    tag: str | None
    positions: torch.Tensor
    media: list[dict]
    encoder_inputs: int = 0


@dataclass
class KameraMetadata(KVConnectorMetadata):
    """What the scheduler hands the worker for one step."""

    work: list[_Work] = field(default_factory=list)


def mrope_stand_in(vllm_config: VllmConfig) -> Any:
    """The served model class with only its ``config`` set, to call its ``get_mrope_input_positions`` (which reads
    ``self.config`` alone) on the scheduler side: the function vLLM's model runner places every request's tokens
    with (``GPUModelRunner._init_mrope_positions``, ``vllm/v1/worker/gpu_model_runner.py``; the CPU runner
    inherits it), so a cached span's positions are the ones vLLM's query after it assumes."""
    from vllm.model_executor.model_loader.utils import get_model_architecture

    cls, _ = get_model_architecture(vllm_config.model_config)
    model = cls.__new__(cls)  # no weights, no torch.nn.Module state: the method only reads self.config
    model.__dict__["config"] = vllm_config.model_config.hf_config
    return model


NO_METADATA = (
    "the step has no attention metadata (vLLM 0.34 calls start_load_kv outside the forward in FULL CUDA-graph "
    "mode), so the splice cannot be written: run the engine eager (enforce_eager=True)"
)


class KameraConnector(KVConnectorBase_V1):
    """Serves kamera chunks (canonical page, R(δ), rank-m patch) into vLLM's paged KV cache; see the module docstring.

    ``kv_connector_extra_config``: ``store`` (the folder of pages and patches) and ``model`` (the store's
    model id, :func:`kamera.engine.store.model_id`). The constructor is vLLM's current contract,
    ``(vllm_config, role, kv_cache_config)`` passed on to the base: ``KVConnectorFactory.get_connector_class``
    (``vllm/distributed/kv_transfer/kv_connector/factory.py``, identical in the 0.32 CPU build and the 0.33 and 0.34
    wheels)
    refuses an external connector whose constructor does not take ``kv_cache_config``.
    """

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = self._kv_transfer_config.kv_connector_extra_config
        self.store = Path(extra["store"])
        self.model = str(extra["model"])
        self.block_size = int(vllm_config.cache_config.block_size)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        if vllm_config.cache_config.enable_prefix_caching:
            raise EngineError("the kamera connector needs prefix caching off (an approximate chunk is not exact KV)")
        hf_config = vllm_config.model_config.hf_config
        self.specs = channels(hf_config)
        self._mrope = mrope_stand_in(vllm_config) if mrope(hf_config) and role == KVConnectorRole.SCHEDULER else None
        self._requests: dict[str, tuple[Request, list[Segment], torch.Tensor, list[dict]]] = {}
        self._layout: dict[tuple, torch.Tensor] = {}
        self._captured: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}
        self._failed: set[str] = set()  # requests whose load failed on the worker this step: nothing of them is kept
        self._load_errors: set[int] = set()  # their blocks, for vLLM to recompute (get_block_ids_with_load_errors)

    # ----- vLLM 0.34's optional hooks (0.32's base has none of them; defined here, they are plain methods) -----
    @classmethod
    def supports_lookahead_block_hashes(cls, kv_transfer_config: Any) -> bool:
        """False: a claim is keyed by its segments' store keys, token ids and media, never by
        ``request.block_hashes``, so 0.34's lookahead hashing (a speculative decoder's next tokens folded into each
        block's hash, ``VllmConfig._resolve_num_hash_lookahead_tokens`` in ``vllm/config/vllm.py``) serves it
        nothing; vLLM then keeps no lookahead."""
        return False

    def may_load_async(self, request: Request) -> bool:
        """False: every splice is loaded synchronously, in the step that computes the rest of the prompt."""
        return False

    # ----- scheduler side ------------------------------------------------------------------------
    def positions(self, request: Request) -> torch.Tensor:
        """The request's prompt positions as vLLM places them: 0..n−1, or M-RoPE's [3, n] from the model's own
        ``get_mrope_input_positions`` (:func:`mrope_stand_in`)."""
        prompt = list(request.prompt_token_ids)
        if self._mrope is None:
            return torch.arange(len(prompt))
        features = [f for f in request.mm_features if f.modality != "prompt_embeds"]
        pos, _ = self._mrope.get_mrope_input_positions(prompt, features)
        return torch.as_tensor(pos, dtype=torch.int64)

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        params = (request.kv_transfer_params or {}).get(PARAMS)
        if not params:
            return 0, False
        segs = segments(request.kv_transfer_params)
        positions, media = self.positions(request), media_of(request.mm_features)
        if segs and num_computed_tokens:
            raise EngineError(f"{num_computed_tokens} tokens already computed: turn prefix caching off")
        try:
            n = check_plan(
                segs, request.prompt_token_ids, self.store, self.model, self.specs, self.max_model_len, positions, media
            )
        except (EngineError, StoreError) as err:  # kv_load_failure_policy="recompute": exact prefill, and it is said
            self._record({"tag": params.get("tag"), "request": request.request_id, "fallback": str(err)})
            segs, n = [], 0
        self._requests[request.request_id] = (request, segs, positions, media)
        return n, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        """Nothing to do: the block ids reach the worker through :meth:`build_connector_meta`."""

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = KameraMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            held = self._requests.pop(new.req_id, None)
            if held is None:
                continue
            request, segs, positions, media = held
            params = request.kv_transfer_params[PARAMS]
            prompt = list(new.prompt_token_ids or [])
            if params.get("capture") and scheduler_output.num_scheduled_tokens[
                new.req_id
            ] + new.num_computed_tokens < len(prompt):
                raise EngineError("a capture needs its whole prompt in one step: raise max_num_batched_tokens")
            encoder = len(scheduler_output.scheduled_encoder_inputs.get(new.req_id, []))
            meta.work.append(
                _Work(
                    new.req_id,
                    prompt,
                    list(new.block_ids[0]),
                    segs,
                    params.get("capture"),
                    params.get("tag"),
                    positions,
                    media,
                    encoder,
                )
            )
        if (
            meta.work
        ):  # start_load_kv before the forward (a capture learns the layout there), as hisparse/connector.py does
            scheduler_output.has_sync_kv_loads = True
        return meta

    def _record(self, entry: dict) -> None:
        """Append one record to the store's (:func:`kamera.engine.store.record`: splices' timings, fallbacks)."""
        record(self.store, entry)

    # ----- worker side -------------------------------------------------------------------------------
    def _attention_layers(self, forward_context: ForwardContext) -> list[tuple[int, str, torch.nn.Module]]:
        out = []
        for name, layer in forward_context.no_compile_layers.items():
            cache = getattr(layer, "kv_cache", None)
            if not (isinstance(cache, torch.Tensor) and cache.numel()):
                continue
            if not hasattr(getattr(layer, "impl", None), "do_kv_cache_update"):
                raise EngineError(f"{name}: attention backend {type(layer.impl).__name__} has no do_kv_cache_update")
            out.append((int(_LAYER.search(name).group(1)), name, layer))
        return sorted(out)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KameraMetadata):
            return
        if forward_context.attn_metadata is None:  # nothing can be written (vLLM 0.34 in FULL CUDA-graph mode)
            for w in meta.work:
                if w.segments:
                    self._fail(w, EngineError(NO_METADATA))
            return
        layers = self._attention_layers(forward_context)
        self._failed.clear()
        for w in meta.work:
            if w.capture:
                _, _, layer = layers[0]
                key = (tuple(layer.kv_cache.shape[1:]), layer.kv_cache.dtype)
                if key not in self._layout:
                    self._layout[key] = learn_layout(layer, layer.kv_cache, w.block_ids[0], self.specs, self.block_size)
                self._captured[w.req_id] = {}
            if not w.segments:
                continue
            t0 = time.perf_counter()
            try:  # the scheduler checked the plan, but a page can vanish or change on disk before this step
                page = compose(w.segments, self.store, self.model, self.specs, w.positions)
                if page.n_layers != len(layers):
                    raise EngineError(f"the chunk has {page.n_layers} layers, the engine {len(layers)}")
            except (EngineError, StoreError) as err:
                self._fail(w, err)
                continue
            t1 = time.perf_counter()
            slots = slot_mapping(w.block_ids, self.block_size, page.n_tokens, layers[0][2].kv_cache.device)
            width = self.block_size * sum(s.width for s in self.specs)
            for l, _, layer in layers:
                if layer.kv_cache[0].numel() != width:
                    raise EngineError(
                        f"a cache block holds {layer.kv_cache[0].numel()} elements, not the scheduler's "
                        f"{self.block_size} tokens of {'/'.join(s.name for s in self.specs)}"
                    )
                write_kv(layer, page.layers[l], layer.kv_cache, slots)
            t2 = time.perf_counter()
            self._record(
                {
                    "tag": w.tag,
                    "tokens": page.n_tokens,
                    "compose_s": t1 - t0,
                    "write_s": t2 - t1,
                    "encoder_inputs": w.encoder_inputs,
                }
            )

    def _fail(self, w: _Work, err: Exception) -> None:
        """A load that failed on the worker: nothing is written, every block the claim covers is reported to vLLM
        (whose ``kv_load_failure_policy="recompute"`` prefills the request again from its first token, discarding
        this step's output), the request's capture is dropped, and the cause recorded."""
        self._failed.add(w.req_id)
        self._captured.pop(w.req_id, None)
        n = sum(s.n for s in w.segments)
        self._load_errors.update(w.block_ids[: -(-n // self.block_size)])
        self._record({"tag": w.tag, "request": w.req_id, "fallback": str(err), "side": "worker"})

    def get_block_ids_with_load_errors(self) -> set[int]:
        """The blocks of requests whose load failed since the last call (:meth:`_fail`); vLLM recomputes them."""
        out, self._load_errors = self._load_errors, set()
        return out

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing to wait for: :meth:`start_load_kv` writes every layer before the forward."""

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KameraMetadata):
            return
        for w in meta.work:
            if w.capture and w.req_id not in self._failed:
                layout = self._layout[(tuple(kv_layer.shape[1:]), kv_layer.dtype)]
                l = int(_LAYER.search(layer_name).group(1))
                self._captured[w.req_id][l] = read_block_kv(kv_layer, layout, w.block_ids, len(w.prompt), self.specs)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KameraMetadata):
            return
        for w in meta.work:
            if not w.capture or w.req_id in self._failed:
                continue
            got = self._captured.pop(w.req_id)
            page = ChunkKV(self.specs, [got[l] for l in sorted(got)], w.positions)
            save_page(self.store, w.capture, page, torch.tensor(w.prompt), self.model, w.media)


# ----- the client: one engine, requests in, log-probs out -------------------------------------------
class EngineSession(StoreSession):
    """An offline vLLM engine with the kamera connector, prefix caching off, on the store folder ``store``.

    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this process, so its errors reach the
    caller; ``enforce_eager`` keeps vLLM's reference kernels (no graph capture). Requests are checked
    here with the connector's own :func:`check_plan` before they are submitted; what only the scheduler
    knows (M-RoPE positions, media digests) is checked there, and a splice that fails it is served by vLLM's
    exact prefill instead and reported (:attr:`Output.fallback`; :meth:`run` raises unless ``fallback_ok``).

    ``connector=False`` builds the same engine without the connector (no ``kv_transfer_config``): the reference a
    fallback must equal byte for byte (``tests/engine/test_fallback.py``).

    A multimodal model (M-RoPE families) loads its tokenizer and processor (vLLM's multimodal processor needs
    them) and keeps vLLM's processor cache on: only then does vLLM key each image by its content hash (the
    ``identifier`` a page's media record; without the cache it numbers the images of a request instead), and
    the engine core restores a cached image's data before the scheduler sees the request. Prompts are given
    **expanded** (one image token per image embedding, :meth:`expand`); :meth:`run` submits one image token per
    image, vLLM expands it, and the expansion must give back the prompt.

    MLA models run with vLLM's rotary custom op off (``custom_ops=["-rotary_embedding"]``, its torch
    ``forward_native`` instead): the CPU build's ``torch.ops._C.rotary_embedding`` (``RotaryEmbedding.
    forward_cpu``, ``vllm/model_executor/layers/rotary_embedding/base.py``) strides the key by heads × head
    size, while MLA hands it k_pe as a view into the ``[latent · k_pe]`` projection row
    (``MultiHeadLatentAttentionWrapper.forward``, ``vllm/model_executor/layers/mla.py``), so most cached k_pe
    rows stay unrotated and vLLM's own prefill disagrees with transformers' by ~2e-2 in the log-probs
    (1e-6 with the op off).
    """

    # a query row is computed alike over cached and fresh keys (CPU_ATTN), so a GQA round trip is bit for bit
    extend_bitwise = True

    def __init__(
        self,
        model: str | Path,
        store: str | Path,
        dtype: str = "float32",
        max_model_len: int = 2048,
        block_size: int = BLOCK_SIZE,
        kv_cache_gib: int = 1,
        connector: bool = True,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        from vllm import LLM
        from vllm.config import KVTransferConfig

        super().__init__(model, store, dtype, max_model_len)
        kv = None if not connector else KVTransferConfig(
            kv_connector="KameraConnector",
            kv_connector_module_path=__name__,
            kv_role="kv_both",
            kv_connector_extra_config={"store": str(self.store), "model": self.model},
            kv_load_failure_policy="recompute",
        )
        # the attention kernels chosen, not inherited (kamera.engine.family.select_kernels): on a CPU, CPU_MLA for MLA
        # whatever the CPU (vLLM alone takes bf16-only AMX_MLA on AMX), CPU_ATTN for GQA / MHA
        self.kernels = platform_kernels(self.config, dtype, block_size)
        self.attention_backend = self.kernels.backend
        chosen = {} if self.attention_backend is None else {"attention_config": {"backend": self.attention_backend}}
        self.llm = LLM(
            model=self.path,
            dtype=dtype,
            enforce_eager=True,
            enable_prefix_caching=False,
            max_model_len=max_model_len,
            block_size=block_size,
            max_num_batched_tokens=max_model_len,
            max_logprobs=self.vocab,
            kv_transfer_config=kv,
            seed=0,
            **self.engine_args(self.config),
            **chosen,
        )

    @staticmethod
    def engine_args(hf_config: Any) -> dict:
        """Extra engine arguments a family needs: MLA, vLLM's rotary custom op off (the class docstring); M-RoPE
        (multimodal), the tokenizer and processor loaded, the processor cache on, images only; text, no tokenizer."""
        if attention(hf_config) == "MLA":
            return {"skip_tokenizer_init": True, "compilation_config": {"custom_ops": ["-rotary_embedding"]}}
        if mrope(hf_config):
            return {"mm_processor_cache_gb": 1, "limit_mm_per_prompt": {"image": 4, "video": 0}}
        return {"skip_tokenizer_init": True}

    def expand(self, ids: list[int], images: list[Any]) -> list[int]:
        """``ids`` with each single image token replaced by as many as the image's embedding has rows (the
        checkpoint's image processor: grid t·h·w / merge², as vLLM's Qwen-VL processors expand it)."""
        from transformers import AutoImageProcessor

        if not images:
            return list(ids)
        if not mrope(self.config):
            raise EngineError(
                f"{self.config.model_type} takes no images here: the connector serves images of M-RoPE families only"
            )
        image_id = int(self.config.image_token_id)
        if ids.count(image_id) != len(images):
            raise EngineError(f"{ids.count(image_id)} image tokens for {len(images)} images")
        proc = AutoImageProcessor.from_pretrained(self.path)
        merge = int(proc.merge_size) ** 2
        sizes = iter(int(g.prod()) // merge for g in proc(images=list(images), return_tensors="pt")["image_grid_thw"])
        return [t for i in ids for t in ([image_id] * next(sizes) if i == image_id else [i])]

    def run(
        self,
        prompt: list[int],
        kamera: dict | None = None,
        images: list[Any] | None = None,
        fallback_ok: bool = False,
        top: int | None = None,
    ) -> Output:
        """One greedy step on ``prompt`` (expanded, :meth:`expand`) and its ``images`` with the kamera parameters
        ``kamera`` (capture and / or segments). A splice the scheduler refuses is served by vLLM's prefill:
        EngineError naming why, or (``fallback_ok``) an Output that says so. ``top``: how many next-token
        log-probs vLLM returns (None: the whole vocabulary, for KL; a clock asks for 1, since building a
        vocabulary-sized log-prob list costs seconds on a 49k vocabulary and would swamp the time measured).

        Without ``fallback_ok`` the plan is checked here first and a bad one refused before anything runs; with it
        the request goes to the engine as a server's client would send it, and the connector alone decides: a page
        or patch missing, unreadable, corrupt or of other weights is never partly served, the request is prefilled
        exactly (claim 0 on the scheduler side; on the worker side, its blocks reported to vLLM, which recomputes
        them) and :attr:`Output.fallback` names the cause."""
        from vllm import SamplingParams

        params = {PARAMS: kamera} if kamera else None
        segs = segments(params)
        if not fallback_ok:
            check_plan(segs, prompt, self.store, self.model, self.specs, self.max_model_len)
        extra = {"kv_transfer_params": params} if params else None
        sp = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=self.vocab if top is None else top, extra_args=extra
        )
        request: dict[str, Any] = {"prompt_token_ids": list(prompt)}
        if images:
            image_id = int(self.config.image_token_id)
            request = {
                "prompt_token_ids": [
                    t for i, t in enumerate(prompt) if t != image_id or i == 0 or prompt[i - 1] != image_id
                ],
                "multi_modal_data": {"image": list(images)},
            }
        seen = len(self.timings())
        t0 = time.perf_counter()
        out = self.llm.generate([request], sp, use_tqdm=False)[0]
        seconds = time.perf_counter() - t0
        if list(out.prompt_token_ids) != list(prompt):
            raise EngineError(
                f"vLLM expanded the prompt to {len(out.prompt_token_ids)} tokens, not the given {len(prompt)}: "
                "give it expanded (EngineSession.expand)"
            )
        lp = torch.full((self.vocab,), float("-inf"), dtype=torch.float64)
        for tok, entry in out.outputs[0].logprobs[0].items():
            lp[tok] = entry.logprob
        cached = int(out.num_cached_tokens or 0)
        claim = sum(s.n for s in segs)
        token = int(out.outputs[0].token_ids[0])
        fallback = next((r["fallback"] for r in self.timings()[seen:] if "fallback" in r), None)
        if fallback is not None and claim:
            if not fallback_ok:
                raise EngineError(f"the splice fell back to vLLM's prefill: {fallback}")
            return Output(lp, cached, seconds, fallback, token)
        if cached != claim:
            raise EngineError(f"vLLM reports {cached} cached tokens, the splice claimed {claim}")
        return Output(lp, cached, seconds, token=token)

    def close(self) -> None:
        """Shut the engine down (connector, process group, memory) so another session can start in this process.

        The engine core is shut down here, not left to its garbage-collection finalizer: an object still holding the
        closed engine (a captured log record's arguments) would otherwise run that finalizer later and tear down the
        process group of the engine live by then."""
        from vllm.distributed.kv_transfer import ensure_kv_transfer_shutdown
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()  # detaches the finalizer (InprocClient.shutdown)
        del self.llm
        gc.collect()
        ensure_kv_transfer_shutdown()
        cleanup_dist_env_and_memory()


__all__ = ["EngineError", "EngineSession", "KameraConnector", "Output", "StoreError", "check_plan"]
