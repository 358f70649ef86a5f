"""A vLLM V1 KV connector that splices a stored chunk into the engine's paged KV cache (paper §6, Fig. 12).

The connector follows vLLM's out-of-tree connector API, ``KVConnectorBase_V1`` in
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` (read in vllm-project/vllm and in the installed
0.32 build), and the shape of its reference connector ``.../v1/example_connector.py``:

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
import json
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

from kamera.core import ChannelSpec, ChunkKV, concat, family_rank_view, relocate
from kamera.engine.family import EngineError, attention, channels
from kamera.engine.store import StoreError, load_page, load_patch, model_id, save_page

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

PARAMS = "kamera"  # the key of kv_transfer_params a kamera request uses
TIMING_FILE = "timing.jsonl"  # per splice: tokens written, seconds composing and writing (in the store folder)
_LAYER = re.compile(r"layers\.(\d+)\.")


# ----- one request's splice plan (checked on both sides) ------------------------------------------
@dataclass(frozen=True)
class Segment:
    """Tokens ``[a, b)`` of page ``key`` placed at ``start`` (re-rotated unless ``rotate`` is False, patched if ``patch``)."""

    key: str
    a: int
    b: int
    start: int
    rotate: bool = True
    patch: str | None = None
    rank: int | None = None

    @property
    def n(self) -> int:
        return self.b - self.a


def segments(params: dict | None) -> list[Segment]:
    """The segments a request's ``kamera`` parameters name (empty for none), laid end to end from position 0."""
    spec = (params or {}).get(PARAMS) or {}
    out, at = [], 0
    for i, s in enumerate(spec.get("segments") or []):
        unknown = set(s) - {"key", "span", "start", "rotate", "patch", "rank"}
        if unknown or "key" not in s or "span" not in s:
            raise EngineError(f"segment {i} needs key and span (and may give start, rotate, patch, rank), got {sorted(s)}")
        a, b = (int(x) for x in s["span"])
        seg = Segment(str(s["key"]), a, b, int(s.get("start", at)), bool(s.get("rotate", True)), s.get("patch"),
                      None if s.get("rank") is None else int(s["rank"]))
        if not 0 <= a < b:
            raise EngineError(f"segment {i} has an empty or negative span [{a}, {b})")
        if seg.start != at:
            raise EngineError(f"segment {i} starts at {seg.start}; segments must tile the prompt from 0 (next is {at})")
        out.append(seg)
        at += seg.n
    return out


def check_plan(segs: list[Segment], prompt: list[int] | torch.Tensor, store: Path, model: str,
               specs: tuple[ChannelSpec, ...], max_model_len: int) -> int:
    """The number of tokens the plan claims, after checking every page and patch exists, is this model's and fits.

    Raises :class:`EngineError` / :class:`~kamera.engine.store.StoreError` for a missing chunk, another
    model's chunk, tokens that differ from the prompt's, or a claim that leaves no token to compute or runs
    past ``max_model_len``: a bad splice is refused, never silently recomputed.
    """
    prompt = torch.as_tensor(list(prompt), dtype=torch.int64)
    n = sum(s.n for s in segs)
    if len(prompt) > max_model_len:
        raise EngineError(f"prompt of {len(prompt)} tokens is past the engine's max_model_len {max_model_len}")
    if segs and n >= len(prompt):
        raise EngineError(f"the splice claims {n} of {len(prompt)} prompt tokens; at least the last one must be computed")
    for s in segs:
        page, ids = load_page(store, s.key, model, specs)
        if s.b > page.n_tokens:
            raise EngineError(f"segment span [{s.a}, {s.b}) is past page {s.key!r} of {page.n_tokens} tokens")
        if not torch.equal(ids[s.a:s.b], prompt[s.start:s.start + s.n]):
            raise EngineError(f"page {s.key!r} tokens [{s.a}, {s.b}) differ from the prompt's tokens at {s.start}")
        if s.patch is not None:
            patch = load_patch(store, s.patch, model, specs)
            if patch.n_tokens != s.n:
                raise EngineError(f"patch {s.patch!r} covers {patch.n_tokens} tokens, the segment {s.n}")
    return n


def compose(segs: list[Segment], store: Path, model: str, specs: tuple[ChannelSpec, ...]) -> ChunkKV:
    """The claimed KV at positions 0..n−1: each segment's page slice moved by R(δ) (or not), patched at its rank
    (MLA: k_pe at ⌈m/4⌉, kamera's rank rule, :func:`kamera.core.family_rank_view`)."""
    kind = "MLA" if specs[0].name == "c_kv" else "GQA"
    parts = []
    for s in segs:
        page, _ = load_page(store, s.key, model, specs)
        part = page.slice(s.a, s.b)
        delta = s.start - int(part.positions[0])
        if not s.rotate:
            parts.append(ChunkKV(specs, part.layers, part.positions + delta))
        elif s.patch is None:
            parts.append(relocate(part, delta))
        else:
            patch = load_patch(store, s.patch, model, specs)
            patch = patch.relocate(s.start - int(patch.positions[0])) if int(patch.positions[0]) != s.start else patch
            parts.append(family_rank_view(patch, s.rank, kind).apply(part, delta))
    return concat(parts)


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
        raise EngineError("the attention backend's cache block is not a permutation of its channels; cannot read it back")
    return got


def read_block_kv(kv_cache: torch.Tensor, layout: torch.Tensor, block_ids: list[int], n: int,
                  specs: tuple[ChannelSpec, ...]) -> tuple[torch.Tensor, ...]:
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
    """One request's work this step: a splice to load and/or a capture to store."""

    req_id: str
    prompt: list[int]
    block_ids: list[int]
    segments: list[Segment]
    capture: str | None
    tag: str | None


@dataclass
class KameraMetadata(KVConnectorMetadata):
    """What the scheduler hands the worker for one step."""

    work: list[_Work] = field(default_factory=list)


class KameraConnector(KVConnectorBase_V1):
    """Serves kamera chunks (canonical page, R(δ), rank-m patch) into vLLM's paged KV cache; see the module docstring.

    ``kv_connector_extra_config``: ``store`` (the folder of pages and patches) and ``model`` (the store's
    model id, :func:`kamera.engine.store.model_id`).
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
        self.specs = channels(vllm_config.model_config.hf_config)
        self._requests: dict[str, Request] = {}
        self._layout: dict[tuple, torch.Tensor] = {}
        self._captured: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}

    # ----- scheduler side ------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        params = (request.kv_transfer_params or {}).get(PARAMS)
        if not params:
            return 0, False
        self._requests[request.request_id] = request
        segs = segments(request.kv_transfer_params)
        if not segs:
            return 0, False
        if num_computed_tokens:
            raise EngineError(f"{num_computed_tokens} tokens already computed: turn prefix caching off")
        n = check_plan(segs, request.prompt_token_ids, self.store, self.model, self.specs, self.max_model_len)
        return n, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        """Nothing to do: the block ids reach the worker through :meth:`build_connector_meta`."""

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = KameraMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            request = self._requests.pop(new.req_id, None)
            if request is None:
                continue
            params = request.kv_transfer_params[PARAMS]
            prompt = list(new.prompt_token_ids or [])
            if params.get("capture") and scheduler_output.num_scheduled_tokens[new.req_id] + new.num_computed_tokens < len(prompt):
                raise EngineError("a capture needs its whole prompt in one step: raise max_num_batched_tokens")
            meta.work.append(_Work(new.req_id, prompt, list(new.block_ids[0]), segments(request.kv_transfer_params),
                                   params.get("capture"), params.get("tag")))
        if meta.work:  # start_load_kv before the forward (a capture learns the layout there), as hisparse/connector.py does
            scheduler_output.has_sync_kv_loads = True
        return meta

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
        if not isinstance(meta, KameraMetadata) or forward_context.attn_metadata is None:
            return
        layers = self._attention_layers(forward_context)
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
            page = compose(w.segments, self.store, self.model, self.specs)
            if page.n_layers != len(layers):
                raise EngineError(f"the chunk has {page.n_layers} layers, the engine {len(layers)}")
            t1 = time.perf_counter()
            slots = slot_mapping(w.block_ids, self.block_size, page.n_tokens, layers[0][2].kv_cache.device)
            width = self.block_size * sum(s.width for s in self.specs)
            for l, _, layer in layers:
                if layer.kv_cache[0].numel() != width:
                    raise EngineError(f"a cache block holds {layer.kv_cache[0].numel()} elements, not the scheduler's "
                                      f"{self.block_size} tokens of {'/'.join(s.name for s in self.specs)}")
                write_kv(layer, page.layers[l], layer.kv_cache, slots)
            t2 = time.perf_counter()
            record = {"tag": w.tag, "tokens": page.n_tokens, "compose_s": t1 - t0, "write_s": t2 - t1}
            with open(self.store / TIMING_FILE, "a") as f:
                f.write(json.dumps(record) + "\n")

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing to wait for: :meth:`start_load_kv` writes every layer before the forward."""

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KameraMetadata):
            return
        for w in meta.work:
            if w.capture:
                layout = self._layout[(tuple(kv_layer.shape[1:]), kv_layer.dtype)]
                l = int(_LAYER.search(layer_name).group(1))
                self._captured[w.req_id][l] = read_block_kv(kv_layer, layout, w.block_ids, len(w.prompt), self.specs)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, KameraMetadata):
            return
        for w in meta.work:
            if not w.capture:
                continue
            got = self._captured.pop(w.req_id)
            n = len(w.prompt)
            page = ChunkKV(self.specs, [got[l] for l in sorted(got)], torch.arange(n))
            save_page(self.store, w.capture, page, torch.tensor(w.prompt), self.model)


# ----- the client: one engine, requests in, log-probs out -------------------------------------------
@dataclass
class Output:
    """One request's result: next-token log-probs over the whole vocabulary (float64) and what vLLM reports."""

    logprobs: torch.Tensor
    num_cached_tokens: int
    seconds: float


class EngineSession:
    """An offline vLLM engine with the kamera connector, prefix caching off, on the store folder ``store``.

    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this process, so its errors reach the
    caller; ``enforce_eager`` keeps vLLM's reference kernels (no graph capture). Requests are checked
    here with the connector's own :func:`check_plan` before they are submitted.

    MLA models run with vLLM's rotary custom op off (``custom_ops=["-rotary_embedding"]``, its torch
    ``forward_native`` instead): the CPU build's ``torch.ops._C.rotary_embedding`` (``RotaryEmbedding.
    forward_cpu``, ``vllm/model_executor/layers/rotary_embedding/base.py``) strides the key by heads × head
    size, while MLA hands it k_pe as a view into the ``[latent · k_pe]`` projection row
    (``MultiHeadLatentAttentionWrapper.forward``, ``vllm/model_executor/layers/mla.py``), so most cached k_pe
    rows stay unrotated and vLLM's own prefill disagrees with transformers' by ~2e-2 in the log-probs
    (1e-6 with the op off).
    """

    def __init__(self, model: str | Path, store: str | Path, dtype: str = "float32", max_model_len: int = 2048,
                 block_size: int = 32, kv_cache_gib: int = 1) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        from transformers import AutoConfig
        from vllm import LLM
        from vllm.config import KVTransferConfig

        self.path = str(Path(model).resolve())
        self.config = AutoConfig.from_pretrained(self.path)
        self.specs = channels(self.config)
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        self.model = model_id(self.path, dtype)
        self.max_model_len = max_model_len
        self.vocab = int(self.config.vocab_size)
        kv = KVTransferConfig(kv_connector="KameraConnector", kv_connector_module_path=__name__, kv_role="kv_both",
                              kv_connector_extra_config={"store": str(self.store), "model": self.model})
        self.llm = LLM(model=self.path, dtype=dtype, enforce_eager=True, skip_tokenizer_init=True,
                       enable_prefix_caching=False, max_model_len=max_model_len, block_size=block_size,
                       max_num_batched_tokens=max_model_len, max_logprobs=self.vocab, kv_transfer_config=kv,
                       seed=0, **self.engine_args(self.config))

    @staticmethod
    def engine_args(hf_config: Any) -> dict:
        """Extra engine arguments a family needs (MLA: vLLM's rotary custom op off; see the class docstring)."""
        return {"compilation_config": {"custom_ops": ["-rotary_embedding"]}} if attention(hf_config) == "MLA" else {}

    def run(self, prompt: list[int], kamera: dict | None = None) -> Output:
        """One greedy step on ``prompt`` with the kamera parameters ``kamera`` (capture and / or segments)."""
        from vllm import SamplingParams

        params = {PARAMS: kamera} if kamera else None
        segs = segments(params)
        check_plan(segs, prompt, self.store, self.model, self.specs, self.max_model_len)
        extra = {"kv_transfer_params": params} if params else None
        sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=self.vocab, extra_args=extra)
        t0 = time.perf_counter()
        out = self.llm.generate([{"prompt_token_ids": list(prompt)}], sp, use_tqdm=False)[0]
        seconds = time.perf_counter() - t0
        lp = torch.full((self.vocab,), float("-inf"), dtype=torch.float64)
        for tok, entry in out.outputs[0].logprobs[0].items():
            lp[tok] = entry.logprob
        cached = int(out.num_cached_tokens or 0)
        claim = sum(s.n for s in segs)
        if cached != claim:
            raise EngineError(f"vLLM reports {cached} cached tokens, the splice claimed {claim}")
        return Output(lp, cached, seconds)

    def page(self, key: str) -> tuple[ChunkKV, torch.Tensor]:
        """A stored page and its token ids."""
        return load_page(self.store, key, self.model, self.specs)

    def close(self) -> None:
        """Shut the engine down (connector, process group, memory) so another session can start in this process."""
        from vllm.distributed.kv_transfer import ensure_kv_transfer_shutdown
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        del self.llm
        gc.collect()
        ensure_kv_transfer_shutdown()
        cleanup_dist_env_and_memory()

    def timings(self) -> list[dict]:
        """The connector's per-splice timing records so far."""
        path = self.store / TIMING_FILE
        return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


__all__ = ["EngineError", "EngineSession", "KameraConnector", "Output", "StoreError", "check_plan"]
