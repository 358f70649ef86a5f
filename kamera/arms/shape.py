"""The first item shape: ``[prefix · A… · B · query]`` evaluation items × arms (and probes).

Its items come from a data benchmark (:mod:`kamera.data`, each ``ChunkedItem`` as an
:class:`~kamera.items.eval.EvalItem`) or, for ``bench=binding``, from the toy model's own task
(:mod:`kamera.toy.items`: the only selection that needs the model). Per item the shared forwards run
once (the union of the arms' and probes' ``needs``), then each arm and probe: one row per (item, arm).
"""

from __future__ import annotations

import inspect
import json
import math
import re
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import ClassVar

from omegaconf import DictConfig, OmegaConf

from kamera.arms import ArmRefusal
from kamera.data import MediaError, get_benchmark
from kamera.data.items import from_chunked
from kamera.data.scorers import stuck
from kamera.errors import ItemError
from kamera.items.eval import EvalItem
from kamera.items.selection import Selection
from kamera.job.lists import unread_lists
from kamera.job.rows import row
from kamera.job.samples import sample_columns
from kamera.job.selection import bench_root, read_benchmark
from kamera.job.spec import Spec, build_specs
from kamera.metrics import E90_COLUMNS, choice_argmax, e90_columns, eta, flipped, kl, recovered
from kamera.models import Adapter
from kamera.models.flops import Forward, ItemShape
from kamera.reuse.context import ReuseContext
from kamera.reuse.forwards import item_forwards
from kamera.reuse.plugin import SHARED
from kamera.toy.benches import MODEL_BENCHES


class ArmItems:
    """Evaluation items × arms (and probes): every job no other shape claims (a data benchmark, the model's task)."""

    name = "arm"
    order = 9  # asked last: it takes every job the other shapes leave
    claim_key = claim_bench = None  # claims every job
    places_items = True  # item_offset moves its items
    kinds = ("arm", "probe")  # the plugin lists the job reads: cfg.arms, cfg.probes
    identity_tag: ClassVar[dict] = {}  # nothing added to the config identity
    cost_keys = ("n", "n_b", "image_tokens")  # cost.tokens.<bench>: tokens per item, B's tokens, image tokens

    @classmethod
    def of(cls, cfg: DictConfig, bench: object) -> ArmItems:
        return cls()

    def selects_from_model(self, cfg: DictConfig) -> bool:
        """Whether selecting the items needs the loaded model (the toy task's items are the toy model's)."""
        return cfg.bench.name in MODEL_BENCHES

    def reads(self, cfg: DictConfig) -> str | None:
        """The data benchmark whose files the job reads: its own benchmark (None for the model's own task)."""
        return None if cfg.bench.name in MODEL_BENCHES else str(cfg.bench.name)

    def problems(self, cfg: DictConfig) -> list[str]:
        """Benchmark name, subsets, split and kwargs, checked against the loader's own signature; no window
        probes in an arm job."""
        p = [] if cfg.scoring in SCORINGS else [f"scoring={cfg.scoring!r}: must be one of {', '.join(SCORINGS)}"]
        p += unread_lists(cfg, self.kinds, "only a window benchmark's job runs window probes, and "
                                           f"bench={cfg.bench.name} is not one")
        if (own := MODEL_BENCHES.get(cfg.bench.name)) is not None:
            return p + own.problems(cfg.model.name, cfg.bench.subset)
        try:
            spec = get_benchmark(cfg.bench.name)
            spec.resolve_subsets(cfg.bench.subset)
            spec.resolve_split(cfg.bench.split)
        except ValueError as err:
            return [*p, str(err)]
        if not isinstance(cfg.bench.kwargs, DictConfig):
            return p  # kamera.job.checks.validate reports it
        takes = [n for n, prm in inspect.signature(spec.rows).parameters.items() if prm.kind is prm.KEYWORD_ONLY]
        bad = sorted(set(cfg.bench.kwargs) - set(takes))
        return p + ([f"bench.kwargs {bad} are not options of {spec.name}; it takes {takes}"] if bad else [])

    def plugin_problems(self, cfg: DictConfig, built: dict[str, list[Spec]]) -> list[str]:
        """Each arm's and probe's own problems for this job before load (:meth:`kamera.arms.base.Arm.problems`): the
        device it runs on, the model's depth where its config tells it without weights; and a job with neither."""
        from kamera.models.loading import resolve_device

        if built.keys() == {"arm", "probe"} and not any(built.values()):
            return ["arms=[] and probes=[]: a job needs at least one arm or probe (conf/arm, conf/probe)"]

        try:
            device = "cpu" if resolve_device(cfg.device) == "cpu" else "cuda"
        except (ValueError, TypeError, AttributeError):  # a bad or unavailable device: said by validate
            device = "cuda" if str(cfg.device).startswith("cuda") else "cpu"
        depth = model_depth(cfg)
        return [f"{kind}s: {s.label}: {line}" for kind, specs in built.items() for s in specs
                for line in s.plugin.problems(device=device, n_layers=depth)]

    def specs(self, cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
        """(arms, probes) built from the job's lists."""
        return build_specs("arm", cfg.arms), build_specs("probe", cfg.probes)

    def select(self, cfg: DictConfig, n: int | None, adapter: Adapter | None = None) -> Selection:
        """The benchmark loader's items (or the toy model's task items: pass the adapter), each placed at its
        :func:`placed` offset."""
        if (own := MODEL_BENCHES.get(cfg.bench.name)) is not None:
            if adapter is None:
                raise ValueError(f"bench={cfg.bench.name} draws its items from the model; pass the adapter")
            items = placed(own.select(adapter, n, cfg.seed, cfg.bench.subset), cfg.item_offset)
            return Selection(items, n_requested=n, report=f"{len(items)} items of the toy task")
        root = bench_root(cfg, get_benchmark(cfg.bench.name).dir_name)
        chosen = read_benchmark(cfg.bench.name, root, cfg, n, OmegaConf.to_container(cfg.bench.kwargs, resolve=True))
        chosen.items = placed([from_chunked(it) for it in chosen.items], cfg.item_offset)
        return chosen

    def bench_identity(self, cfg: DictConfig) -> dict:
        """Name, subsets and split spelled out (null = the benchmark's default list), kwargs."""
        subset, split = cfg.bench.subset, cfg.bench.split
        if cfg.bench.name not in MODEL_BENCHES:
            spec = get_benchmark(cfg.bench.name)
            subset, split = ",".join(spec.resolve_subsets(subset)), spec.resolve_split(split)
        return {"name": cfg.bench.name, "subset": subset, "split": split,
                "kwargs": OmegaConf.to_container(cfg.bench.kwargs, resolve=True)}

    def cost_forwards(self, cfg: DictConfig, tokens: dict, specs: tuple[list[Spec], list[Spec]],
                      n_layers: int) -> tuple[list[Forward], float]:
        """(forwards per item, image tokens per item) from the experiment's stated ``cost.tokens.<bench>``."""
        n = int(tokens["n"])
        shape = ItemShape(n=n, n_b=int(tokens.get("n_b", 500)), image_tokens=int(tokens.get("image_tokens", n // 2)))
        arms, probes = specs
        return item_forwards(shape, [s.plugin for s in arms], [s.plugin for s in probes], n_layers), shape.image_tokens

    def runtime_identity(self, cfg: DictConfig) -> dict:
        return {}  # the harness's jobs are keyed by config, checkpoint and data alone

    def serving(self, cfg: DictConfig, adapter: Adapter) -> AbstractContextManager[Adapter]:
        return nullcontext(adapter)  # the items are evaluated on the loaded adapter itself

    def evaluate_item(self, adapter: Adapter, item: EvalItem, arms: list[Spec], probes: list[Spec],
                      cfg: DictConfig, keys: dict) -> tuple[list[dict], list[dict], list[dict]]:
        return evaluate_item(adapter, item, arms, probes, cfg, keys)


def placed(items: list[EvalItem], step: int) -> list[EvalItem]:
    """The i-th item (in selection order) placed at absolute position i · ``step`` (``item_offset``): B then sits at
    a different position in every item, as on a real benchmark whose A varies in length, where the synthetic and
    toy benchmarks put it at one position in every item (step 0, each item as laid out)."""
    return [replace(it, offset=i * step) for i, it in enumerate(items)] if step else items


def model_depth(cfg: DictConfig) -> int | None:
    """The model's decoder layer count without loading weights: a tiny twin's config, or a paper checkpoint's
    config.json (``num_hidden_layers`` of its ``text_config``, else at its top level); None where neither says
    (a toy model, an unreadable or unusual config: the arm's refusal after load then stands)."""
    import json

    from kamera.models import checkpoint_path, entry

    try:
        e = entry(cfg.model.name)
        if e.kind == "tiny":
            return int(e.tiny_config().get_text_config(decoder=True).num_hidden_layers)
        if e.kind != "paper":
            return None
        config = json.loads((checkpoint_path(e.name, cfg.model.path, cfg.paths.models) / "config.json").read_text())
        layers = (config.get("text_config") or config).get("num_hidden_layers")
    except Exception:  # preflight reports an unknown model or unreadable checkpoint on its own
        return None
    return layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else None


SCORINGS = ("logits", "generate")  # cfg.scoring: multiple choice by the logit argmax over the choices, or generated


def parse_choice(text: str, choices: list[str]) -> str:
    """The first word of a generated answer that is one of the choices ("B", "(B) …", "Answer: B." → "B"), as
    lmms-eval parses a multiple-choice generation; "" when none is (scored wrong)."""
    for word in re.findall(r"[^\W_]+", text):
        if word in choices:
            return word
    return ""


def _prediction(
    adapter: Adapter, item: EvalItem, out, choice_ids, cfg: DictConfig
) -> tuple[str, float, str | None, float]:
    """(prediction, score, generated text, stuck): multiple choice by the logit argmax (no text generated, stuck NaN)
    unless ``scoring=generate``, which generates ``max_new_tokens`` greedily and parses the choice; open answers
    generate. ``stuck`` is 1.0 for a generation that stopped making progress (:func:`kamera.data.scorers.stuck`:
    a repeated span at its end, or the length limit reached with no answer its parse can read), else 0.0."""
    if item.choices is not None and cfg.scoring == "logits":
        pred = item.choices[choice_ids.index(choice_argmax(out.logits, choice_ids))]
        return pred, float(pred == item.gold), None, math.nan
    tokens = adapter.greedy(out, cfg.max_new_tokens, adapter.stop_ids())
    text = adapter.decode(tokens).strip()
    if item.choices is not None:
        pred = parse_choice(text, item.choices)
        return pred, float(pred == item.gold), text, float(stuck(tokens, cfg.max_new_tokens, pred != ""))
    answered = item.answered(text) if item.answered is not None else bool(text)
    return text, float(item.score(text)), text, float(stuck(tokens, cfg.max_new_tokens, answered))


def encode(adapter: Adapter, item: EvalItem):
    """The item encoded once (vision tower included); its input problems become an ItemError."""
    try:
        return adapter.encode(item.spans())
    except (ValueError, MediaError) as err:  # too long for the model, media that does not decode, empty span
        raise ItemError(f"item {item.item_id} cannot be encoded by {adapter.name}: {err}") from err


def compute_shared(ctx: ReuseContext, needs: Iterable[str]) -> float:
    """Compute the shared quantities (in :data:`~kamera.reuse.plugin.SHARED` order) before any arm runs; seconds."""
    t0 = time.perf_counter()
    for name in SHARED:
        if name in needs:
            getattr(ctx, name)
    return time.perf_counter() - t0


def item_measures(ctx: ReuseContext, needs: set[str]) -> dict:
    """Per-item measures that come with a shared quantity (the patch's e90/n_B when the patch is formed)."""
    if "patch" not in needs:
        return dict.fromkeys(E90_COLUMNS, math.nan)
    return dict(e90_columns(ctx.patch, ctx.conditioned))


def evaluate_item(
    adapter: Adapter, item: EvalItem, arms: list[Spec], probes: list[Spec], cfg: DictConfig, keys: dict
) -> tuple[list[dict], list[dict], list[dict]]:
    """Run ``arms`` and ``probes`` on one item: (rows, probe records, refusals), one row per arm served.

    The item is encoded once and the union of the arms' and probes' ``needs`` is computed before
    any of them runs, so ``forwards`` in a row counts the forwards that arm ran itself."""
    try:
        ctx = ReuseContext(adapter, encode(adapter, item), canonical_context=cfg.canonical_context, offset=item.offset)
    except ValueError as err:  # placed past the model's context
        raise ItemError(f"item {item.item_id} placed by item_offset={cfg.item_offset}: {err}; "
                        "lower item_offset") from err
    needs = set().union(*(s.plugin.needs for s in [*arms, *probes]))
    if arms:
        needs |= {"full", "blind"}  # every row's KL to re-prefill and the blind floor
    shared_seconds = compute_shared(ctx, needs)
    records = []
    for s in probes:
        for rec in s.plugin.run(ctx):
            records.append({**keys, "item_id": item.item_id, "subset": item.subset, "probe": s.label, "knobs": s.key,
                            **rec})
    if not arms:
        return [], records, []
    ref, blind = ctx.reprefill_logits, ctx.blind.logits
    choice_ids = adapter.letter_ids(item.choices) if item.choices is not None else None
    kl_blind = kl(ref, blind, what=f"re-prefill ‖ blind, item {item.item_id}")
    did_flip, page = flipped(blind, ref, choice_ids), ctx.page_bytes()
    per_item = item_measures(ctx, needs)
    sample = sample_columns(ctx.enc, item.choices)  # the per-sample log's inputs (kamera.job.samples)
    rows, refusals = [], []
    for s in arms:
        t, before = time.perf_counter(), adapter.forwards.total()
        try:
            res = s.plugin.run(ctx)
        except ArmRefusal as why:
            refusals.append({"item_id": item.item_id, "arm": s.label, "knobs": s.key, "reason": str(why)})
            continue
        forwards = adapter.forwards.total() - before
        pred, correct, generated, is_stuck = _prediction(adapter, item, res.out, choice_ids, cfg)
        pair = f"{s.label}, item {item.item_id}"
        k = kl(ref, res.out.logits, what=f"re-prefill ‖ {pair}")
        rank = res.params.get("rank")  # patch, orbit and shadowkv arms carry a rank knob
        rows.append(row(keys, item, s, {
            "params": json.dumps(res.params, sort_keys=True, default=str),
            "rank": math.nan if rank is None else float(rank),
            "effective_rank": float(res.params.get("effective_rank", math.nan)),
            "effective_rotary_rank": float(res.params.get("effective_rotary_rank", math.nan)),
            "n_b": ctx.n_b, "delta": ctx.delta,
            "kl": k, "kl_blind": kl_blind, "eta": eta(k, kl_blind, cfg.eta_floor, what=f"η of {pair}"),
            "kl_oracle": kl(ctx.oracle.logits, res.out.logits, what=f"oracle ‖ {pair}") if "oracle" in needs
            else math.nan,
            "flip": did_flip, "recovered": recovered(res.out.logits, ref, choice_ids),
            "pred": pred, "gold": item.gold, "correct": correct, "n_choices": len(item.choices or []),
            "bytes": int(res.bytes), "bytes_frac": res.bytes / page, "patch_dtype": res.patch_dtype,
            "forwards": forwards, "recomputed_tokens": int(res.recomputed_tokens),
            **per_item, "seconds": time.perf_counter() - t, "shared_seconds": shared_seconds,
            "scoring": cfg.scoring if item.choices is not None else "generate", "generated": generated,
            "stuck": is_stuck, **sample,
        }))
    return rows, records, refusals


SHAPE = ArmItems  # this room's job shape (kamera.discover.job_shapes)
