"""A position-free radix cache for stock SGLang: kamera's chunks served through ``--radix-cache-backend kamera``.

SGLang 0.5.23 picks its prefix cache from a registry (``sglang/srt/mem_cache/registry.py``:
``register_radix_cache_backend(name, factory)``, the factory taking a ``TreeCacheBuildContext``), filled in every
SGLang process by the entry points of the group ``sglang.srt.plugins`` (``sglang/srt/plugins/__init__.py``); kamera's
``pyproject.toml`` names :func:`register` there. Its match key (``RadixKey``) holds token ids and no positions, so a
stock radix cache reuses a chunk only at the position it was computed at. :class:`KameraRadixCache` is SGLang's own
``RadixCache`` (``sglang/srt/mem_cache/radix_cache.py``) with two methods added to, the way SGLang's FlexKV cache
(``.../storage/flexkv/flexkv_radix_cache.py``) loads KV from outside the tree:

- :meth:`~KameraRadixCache.match_prefix`: a request that names segments, or only lists chunks for the cache to find
  in its prompt wherever they now sit (the plan of :mod:`kamera.engine.plan`, :func:`~kamera.engine.plan.
  plan_segments`, in ``sampling_params.custom_params["kamera"]`` as a JSON string) has its plan checked against the
  store
  (:func:`~kamera.engine.plan.check_plan`), its claimed KV composed with kamera's operator
  (:func:`~kamera.engine.plan.compose`: each page slice turned by R(δ) to its new place, plus its stored patch at
  the asked rank), written into slots taken from the ``token_to_kv_pool_allocator`` and inserted as the request's
  matched prefix; SGLang computes only the rest of the prompt. A plan that fails (a page or patch missing, corrupt,
  truncated or of other weights) is served by SGLang's own prefill of the whole prompt, never in part, and its cause
  recorded (:func:`kamera.engine.store.record`).
- :meth:`~KameraRadixCache.checkpoint`: a finished request that asks ``capture`` has every prompt token's KV read
  from the pool and stored as a page (positions 0..n−1, as SGLang places a text prompt).

What is never reused: a spliced prefix is approximate KV (blind or patched), so each splice lives in a tree namespace
of its own (``RadixKey.cache_salt`` = the request id) that no other request can match, and a request without a plan
is matched against nothing (SGLang's exact prefix sharing is off under this backend, as vLLM's prefix caching is off
under kamera's connector): a plain request is a full prefill, the reference a fallback must equal byte for byte.

Pools: GQA / MHA ``MHATokenToKVPool`` (``k_buffer`` / ``v_buffer`` per layer, ``[slots, kv_heads, head_dim]``, K as
the attention stored it, after RoPE) and MLA ``MLATokenToKVPool`` (``kv_buffer`` per layer, ``[slots, 1,
kv_lora_rank + rope_dim]``: the latent and k_pe of kamera's MLA page side by side). Page size 1 only.
"""

from __future__ import annotations

import json
import os
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams, MatchResult
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
from sglang.srt.mem_cache.registry import register_radix_cache_backend, registered_radix_cache_backends

from kamera.core import ChannelSpec, ChunkKV
from kamera.engine.family import EngineError, channels
from kamera.engine.plan import PARAMS, Segment, check_plan, compose, plan_segments
from kamera.engine.store import StoreError, attention_of, model_id, record, save_page

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext

NAME = "kamera"  # --radix-cache-backend kamera
STORE_ENV = "KAMERA_STORE"  # the store folder the backend serves from, read when SGLang builds its cache


def plan_of(req: Req | None) -> dict:
    """A request's kamera parameters (``capture``, ``segments``, ``tag``): ``custom_params["kamera"]``, a JSON
    string (SGLang's custom parameters travel between its processes as flat JSON values), or {}."""
    raw = ((getattr(getattr(req, "sampling_params", None), "custom_params", None) or {}).get(PARAMS)) if req else None
    if raw is None:
        return {}
    plan = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(plan, dict):
        raise EngineError(f"custom_params[{PARAMS!r}] must be a JSON object, got {type(plan).__name__}")
    return plan


def parsed_plan(req: Req) -> dict:
    """:func:`plan_of`, or {} for a plan that does not parse (its request fell back in ``match_prefix``)."""
    try:
        return plan_of(req)
    except (ValueError, AttributeError):
        return {}


def tag_of(req: Req) -> str | None:
    """The plan's ``tag`` (its timing record's name), if it has one."""
    tag = parsed_plan(req).get("tag")
    return None if tag is None else str(tag)


def check_pool(pool: Any, specs: tuple[ChannelSpec, ...]) -> None:
    """EngineError unless ``pool`` holds the two channels ``specs`` name, unquantised, one buffer per layer."""
    if getattr(pool, "store_dtype", None) != getattr(pool, "dtype", None):
        raise EngineError(f"the KV pool stores {pool.store_dtype}, not its dtype {pool.dtype}: a quantised cache")
    if attention_of(specs) == "MLA":
        want = [(1, sum(s.dim for s in specs))]
        got = [tuple(b.shape[1:]) for b in getattr(pool, "kv_buffer", [])[:1]]
    else:
        want = [(s.heads, s.dim) for s in specs]
        got = [tuple(b[0].shape[1:]) for b in (getattr(pool, "k_buffer", None), getattr(pool, "v_buffer", None)) if b]
    if got != want:
        raise EngineError(f"{type(pool).__name__} holds rows of {got}, the model's channels need {want}")


def read_rows(pool: Any, specs: tuple[ChannelSpec, ...], slots: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """Every layer's two channels of the tokens at ``slots``, as the pool holds them (copies, on CPU)."""
    out = []
    for l in range(pool.layer_num):
        if attention_of(specs) == "MLA":
            row = pool.kv_buffer[l][slots]  # [n, 1, kv_lora_rank + rope_dim]
            out.append(tuple(t.cpu().clone() for t in row.split([s.dim for s in specs], dim=-1)))
        else:
            out.append((pool.k_buffer[l][slots].cpu().clone(), pool.v_buffer[l][slots].cpu().clone()))
    return out


def write_rows(pool: Any, specs: tuple[ChannelSpec, ...], slots: torch.Tensor, page: ChunkKV) -> None:
    """Write ``page``'s layers into the pool at ``slots`` (one slot per token), in the pool's dtype."""
    if page.n_layers != pool.layer_num:
        raise EngineError(f"the chunk has {page.n_layers} layers, the engine {pool.layer_num}")
    for l, (a, b) in enumerate(page.layers):
        if attention_of(specs) == "MLA":
            buf = pool.kv_buffer[l]
            buf[slots] = torch.cat([a, b], dim=-1).to(buf.device, buf.dtype)  # [n, 1, kv_lora_rank + rope_dim]
        else:
            pool.k_buffer[l][slots] = a.to(pool.k_buffer[l].device, pool.k_buffer[l].dtype)
            pool.v_buffer[l][slots] = b.to(pool.v_buffer[l].device, pool.v_buffer[l].dtype)


class KameraRadixCache(RadixCache):
    """SGLang's radix cache that also serves kamera splices and captures pages (module docstring)."""

    def __init__(self, params: CacheInitParams, store: Path, model: str, specs: tuple[ChannelSpec, ...],
                 max_len: int) -> None:
        if params.page_size != 1:
            raise EngineError(f"the kamera radix cache takes page size 1, not {params.page_size}")
        super().__init__(params)
        self.store, self.model, self.specs, self.max_len = store, model, specs, max_len
        self.pool = self.token_to_kv_pool_allocator.get_kvcache()
        check_pool(self.pool, specs)
        # per request until its checkpoint: the tokens its splice claims, 0 when it fell back (SGLang may match a
        # waiting request again each scheduling pass: its plan is checked and composed once)
        self._claims: dict[str, int] = {}

    def _key(self, req: Req, tokens: list[int]) -> RadixKey:
        """The request's own namespace: no other request matches a splice (``cache_salt`` = its id)."""
        req.cache_salt = f"kamera:{req.rid}"
        return RadixKey(array("q", tokens), req.extra_key, cache_salt=req.cache_salt)

    def match_prefix(self, params: MatchPrefixParams) -> MatchResult:
        """The tree's own lookups (no request: ``checkpoint`` finding what it inserted) as SGLang's; a request
        without a plan, nothing; a plan, its spliced prefix (composed once, then found in its namespace). A plan that
        cannot be served, however malformed, is nothing matched: SGLang prefills the whole prompt."""
        req = params.req
        if req is None:
            return super().match_prefix(params)
        claim = self._claims.get(req.rid)
        if claim == 0:
            return self._empty_match_result
        if claim:  # spliced on an earlier pass: found in its namespace unless evicted since
            found = super().match_prefix(MatchPrefixParams(key=self._key(req, list(req.origin_input_ids)[:claim])))
            if found.device_prefix_len >= claim:
                return found
        try:
            plan = plan_of(req)
            if not (plan.get("segments") or plan.get("chunks")):
                return self._empty_match_result
            prompt = list(req.origin_input_ids)
            segs = plan_segments({PARAMS: plan}, prompt, self.store, self.model, self.specs)
            if not segs:
                raise EngineError("no listed chunk matches the prompt at position 0")
            n = check_plan(segs, prompt, self.store, self.model, self.specs, self.max_len)
            if n > len(params.key):
                raise EngineError(f"the splice claims {n} tokens, SGLang lets {len(params.key)} be matched")
        except Exception as err:  # a request's bad plan must not take the scheduler down: it is recorded instead
            return self._fall_back(req, err)
        key = self._key(req, prompt[:n])
        found = super().match_prefix(MatchPrefixParams(key=key))
        if found.device_prefix_len >= n:
            return found
        return self._splice(req, segs, key, n)

    def _splice(self, req: Req, segs: list[Segment], key: RadixKey, n: int) -> MatchResult:
        t0 = time.perf_counter()
        try:  # the plan was checked, but a page can change on disk before it is read
            page = compose(segs, self.store, self.model, self.specs)
        except (EngineError, StoreError) as err:
            return self._fall_back(req, err)
        t1 = time.perf_counter()
        alloc = self.token_to_kv_pool_allocator
        if alloc.available_size() < n:
            self.evict(EvictParams(num_tokens=n))
        slots = alloc.alloc(n)
        if slots is None:
            return self._fall_back(req, EngineError(f"no room in the KV pool for {n} spliced tokens"))
        write_rows(self.pool, self.specs, slots, page)
        self._claims[req.rid] = n
        had = self.insert(InsertParams(key=key, value=slots.to(torch.int64))).prefix_len
        alloc.free(slots[:had])  # already in the request's namespace (an earlier match): the tree keeps its own
        record(self.store, {"tag": tag_of(req), "request": req.rid, "tokens": n, "compose_s": t1 - t0,
                            "write_s": time.perf_counter() - t1})
        return super().match_prefix(MatchPrefixParams(key=key))

    def _fall_back(self, req: Req, err: Exception) -> MatchResult:
        """Nothing matched: SGLang prefills the whole prompt; the cause is recorded once."""
        if self._claims.get(req.rid) != 0:
            self._claims[req.rid] = 0
            record(self.store, {"tag": tag_of(req), "request": req.rid, "fallback": f"{type(err).__name__}: {err}"
                                if not isinstance(err, (EngineError, StoreError)) else str(err)})
        return self._empty_match_result

    def checkpoint(self, req: Req, *, up_to: int) -> None:
        """SGLang's checkpoint, after storing a finished request's prompt KV as page ``capture`` (when asked and
        its splice, if any, did not fall back; a capture that cannot be stored is recorded, never raised into the
        scheduler)."""
        plan = {} if self._claims.get(req.rid) == 0 else parsed_plan(req)
        if plan.get("capture") and req.finished():
            try:
                n = len(req.origin_input_ids)
                if up_to < n:
                    raise EngineError(f"only {up_to} of {n} prompt tokens hold KV")
                slots = self.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :n].to(torch.int64)
                page = ChunkKV(self.specs, read_rows(self.pool, self.specs, slots), torch.arange(n))
                save_page(self.store, str(plan["capture"]), page, torch.tensor(list(req.origin_input_ids)), self.model)
            except Exception as err:  # a bad capture key or a full disk must not take the scheduler down
                record(self.store, {"tag": tag_of(req), "request": req.rid, "capture_failed": str(err)})
        self._claims.pop(req.rid, None)
        super().checkpoint(req, up_to=up_to)


def factory(ctx: TreeCacheBuildContext) -> KameraRadixCache:
    """The backend SGLang builds for ``--radix-cache-backend kamera``: the store from ``$KAMERA_STORE``, the model id
    of the served checkpoint and dtype; refused in one line for a cache it cannot serve."""
    store = os.environ.get(STORE_ENV)
    if not store:
        raise EngineError(f"--radix-cache-backend {NAME} needs ${STORE_ENV}, the folder of kamera pages and patches")
    refused = [name for name in ("is_hybrid_swa", "is_hybrid_ssm", "enable_hierarchical_cache", "disable_radix_cache",
                                 "is_dsa") if getattr(ctx, name, False)]
    if refused:
        raise EngineError(f"--radix-cache-backend {NAME} serves a plain full-attention KV pool, not {refused}")
    args = ctx.server_args
    return KameraRadixCache(ctx.params, Path(store), model_id(args.model_path, args.dtype),
                            channels(ctx.model_config.hf_config), int(ctx.model_config.context_len))


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: registers :func:`factory` as ``kamera`` (once per process)."""
    if NAME not in registered_radix_cache_backends():
        register_radix_cache_backend(NAME, factory)
