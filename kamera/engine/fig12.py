"""Fig. 12 inside a live engine: the same items spliced through vLLM's KV connector and through kamera's own splice.

    python -m kamera.engine.fig12 --out results/raw/engine/fig12_tiny        # make fig12 ENGINE=vllm
    python -m kamera.engine.fig12 --out results/raw/engine/fig12_tiny --status  # each job's shard, k / n items
    python -m kamera.engine.fig12 --check --model DIR                         # preflight a checkpoint
    python -m kamera.engine.fig12 --check --models kimi_vl_a3b qwen2_5_vl_7b  # preflight registry models (paper scale)

Per item (random token ids [prefix · A · B · query] with a four-way choice at the answer), for each tiny
checkpoint of :mod:`kamera.engine.checkpoint` (``--families``: the Qwen2, GQA, and the DeepSeek-V2, MLA: its
page is the latent c_KV and k_pe, its patch arms take k_pe at ⌈m/4⌉) and each dtype:

- **vLLM** (``source = vllm``): the full prompt is prefilled by vLLM and captured (the re-prefill: its
  next-token log-probs, KV(B|A) and the exact prefix · A KV), [prefix · B] is prefilled and captured (the
  canonical KV(B|∅)), the patch is formed from the two captures with kamera's operator and stored; each
  arm is then one request that claims [prefix · A · B] through the connector (prefix · A exact, B as the
  arm builds it) and runs only the query; the arm's written KV is captured back from the cache.
- **own splice** (``source = own``): the same items through :class:`kamera.reuse.ReuseContext` on the same
  checkpoint in transformers (the harness's Fig. 12 path).

Arms: ``reprefill``, ``unrotated`` (canonical KV at B's place, not re-rotated), ``blind`` (R(δ) only),
``patch_r8`` / ``patch_r64`` / ``patch_r256`` (rank clamped to min(n_B, width) = full). Rows carry the
columns Fig. 12's panels read (``kl``, ``recovered``, ``pred``, ``correct``, ``n_choices``) plus the ULP
distance of the arm's B KV to the prefill's (``ulp_*``: every layer; ``_l0``: layer 0, which isolates
relocation); ``timing.csv`` holds vLLM's time to first token with and without the splice and the
connector's compose / write seconds (a second source for Fig. 11(b)).

Each (source, checkpoint, dtype) is one job with its own keyed, resumable shard under <out>/shards
(:mod:`kamera.engine.rows`: keyed by the checkpoint's config and weights digest, family, dtype, source, items,
seed and the engine's library versions; records stamped with :data:`kamera.engine.rows.VERSION` and
``kamera.metrics.VERSION``); each finished item is stored atomically, a rerun computes only what the shards
lack (nothing: no engine starts) and a killed run loses at most the item in flight. Every run ends by
writing the view the renderer reads, <out>/rows.csv, <out>/timing.csv and <out>/meta.json (library and code
versions, checkpoints, items, each job's shard).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import logging
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from kamera.core import ChunkKV, Patch, deficit, family_rank_view, relocate
from kamera.engine.checkpoint import CHECKPOINTS
from kamera.engine.family import EngineError, mrope, preflight, preflight_model
from kamera.engine.rows import SOURCES, EngineRowsError, Job, folder_lock, plan, run_jobs
from kamera.engine.store import save_patch
from kamera.engine.verify import image
from kamera.items.spans import Span
from kamera.job.store import ShardCorruptError
from kamera.metrics import bf16_ulps, kl
from kamera.models.base import Adapter, Encoded, EncodedSpan
from kamera.models.mla import DeepseekV2Adapter
from kamera.models.text import TextAdapter
from kamera.reuse.context import ReuseContext

ARMS = ("reprefill", "unrotated", "blind", "patch_r8", "patch_r64", "patch_r256")
CHOICES = (10, 11, 12, 13)  # the answer tokens a multiple-choice item reads its prediction from
SIZES = {"prefix": 4, "A": 96, "B": 160, "query": 8}
ADAPTERS = {"qwen2": TextAdapter, "deepseek_v2": DeepseekV2Adapter}  # the own splice's adapter per engine family
BENCH = "random_mc"


def items(n: int, seed: int = 0) -> list[dict]:
    """``n`` items of random token ids (ids above the answer tokens) and a random gold choice; item i is the same
    for every ``n`` (one generator, drawn in order)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        spans = {role: torch.randint(16, 500, (k,), generator=g).tolist() for role, k in SIZES.items()}
        gold = int(torch.randint(0, len(CHOICES), (1,), generator=g))
        out.append({"item_id": f"r{i:03d}", **spans, "gold": gold, "seed": seed})
    return out


def rank_of(arm: str) -> int:
    return int(arm.removeprefix("patch_r"))


def ulp_stats(got: ChunkKV, ref: ChunkKV) -> dict[str, float]:
    """Fractions of B's K and V elements equal to / within one / within four bf16 ULPs of ``ref``
    (:func:`bf16_ulps`); over every layer and over layer 0 alone (which isolates relocation). Fractions, not a
    maximum: an element whose reference is an exact zero has no ULP scale of its own."""
    def stats(layers: range) -> tuple[float, float, float]:
        d = torch.cat([bf16_ulps(got.layers[l][c], ref.layers[l][c]).flatten() for l in layers for c in range(2)])
        return float((d == 0).double().mean()), float((d <= 1).double().mean()), float((d <= 4).double().mean())

    eq, le1, le4 = stats(range(got.n_layers))
    eq0, le10, le40 = stats(range(1))
    return {"ulp_eq": eq, "ulp_le1": le1, "ulp_le4": le4, "ulp_eq_l0": eq0, "ulp_le1_l0": le10, "ulp_le4_l0": le40}


def row(source: str, model: str, dtype: str, item: dict, arm: str, logits: torch.Tensor, ref: torch.Tensor, seconds: float,
        ulp: dict | None) -> dict:
    """One Fig. 12 row: KL to re-prefill, argmax kept, the multiple-choice answer, ULP distances."""
    pred = int(torch.argmax(logits[list(CHOICES)]))
    return {"source": source, "model": model, "dtype": dtype, "bench": BENCH, "subset": "", "seed": item["seed"],
            "item_id": item["item_id"], "arm": arm, "kl": 0.0 if arm == "reprefill" else kl(ref, logits),
            "recovered": bool(torch.argmax(logits) == torch.argmax(ref)), "pred": pred, "gold": item["gold"],
            "correct": pred == item["gold"], "n_choices": len(CHOICES), "seconds": seconds, **(ulp or {})}


# ----- the engine ---------------------------------------------------------------------------------------
def served_spans(session, item: dict) -> tuple[tuple[list[int], ...], list, list]:
    """The item's spans (prefix, A, B, query) as the served model takes them, its images and B's images.

    A text model takes the drawn ids. An M-RoPE (VL) model gets an image in the middle of A and one at the head of
    B (random pixels seeded by the item, :func:`kamera.engine.verify.image`), each between its vision markers and
    expanded by the checkpoint's processor: the cached chunk B then starts with image tokens, and δ is the rows'
    shift (A's image advances them by its grid side), not B's token offset."""
    spans = tuple(item[r] for r in ("prefix", "A", "B", "query"))
    if not mrope(session.config):
        return spans, [], []
    cfg = session.config
    marks = [int(cfg.vision_start_token_id), int(cfg.image_token_id), int(cfg.vision_end_token_id)]
    k = 2 * (1000 * item["seed"] + int(item["item_id"].lstrip("r")))
    a_img, b_img = image(k, (100, 90)), image(k + 1, (60, 120))
    p, a, b, q = spans
    half = len(a) // 2
    a = session.expand(a[:half] + marks + a[half:], [a_img])
    b = session.expand(marks + b, [b_img])
    return (p, a, b, q), [a_img, b_img], [b_img]


def engine_item(session, name: str, item: dict, dtype: str) -> tuple[list[dict], dict]:
    """One item through vLLM (the model labelled ``name``): the rows of every arm and one timing record."""
    i = item["item_id"]
    (p, a, b, query), images, b_images = served_spans(session, item)
    full = p + a + b + query
    pa, pb = len(p) + len(a), len(p) + len(a) + len(b)
    ref = session.run(full, {"capture": f"{i}.full"}, images=images)
    session.run(p + b, {"capture": f"{i}.canon"}, images=b_images)
    full_page, _ = session.page(f"{i}.full")
    canon, _ = session.page(f"{i}.canon")
    conditioned = full_page.slice(pa, pb)
    delta = int(full_page.positions[..., pa].reshape(-1)[0] - canon.positions[..., len(p)].reshape(-1)[0])
    patch = Patch.form(deficit(conditioned, relocate(canon.slice(len(p), len(p) + len(b)), delta)),
                       dtype=conditioned.dtype)
    save_patch(session.store, f"{i}.patch", patch, session.model)
    rows = [row("vllm", name, dtype, item, "reprefill", ref.logprobs.float(), ref.logprobs.float(), ref.seconds,
                ulp_stats(conditioned, conditioned))]
    for arm in ARMS[1:]:
        seg = {"key": f"{i}.canon", "span": [len(p), len(p) + len(b)], "start": pa}
        if arm == "unrotated":
            seg["rotate"] = False
        elif arm.startswith("patch_r"):
            seg |= {"patch": f"{i}.patch", "rank": rank_of(arm)}
        out = session.run(full, {"capture": f"{i}.{arm}", "tag": f"{i}.{arm}",
                                 "segments": [{"key": f"{i}.full", "span": [0, pa]}, seg]}, images=images)
        written, _ = session.page(f"{i}.{arm}")
        rows.append(row("vllm", name, dtype, item, arm, out.logprobs.float(), ref.logprobs.float(), out.seconds,
                        ulp_stats(written.slice(pa, pb), conditioned)))
    # timing without captures: vLLM's prefill of the prompt vs the query after a rank-64 splice
    prefill = session.run(full, images=images)
    seg = {"key": f"{i}.canon", "span": [len(p), len(p) + len(b)], "start": pa, "patch": f"{i}.patch", "rank": 64}
    spliced = session.run(full, {"tag": f"{i}.timing", "segments": [{"key": f"{i}.full", "span": [0, pa]}, seg]},
                          images=images)
    rec = next(r for r in reversed(session.timings()) if r["tag"] == f"{i}.timing")
    timing = {"source": "vllm", "model": name, "dtype": dtype, "item_id": i, "prompt_tokens": len(full),
              "claimed_tokens": rec["tokens"], "spliced_tokens": len(b), "ttft_prefill_s": prefill.seconds,
              "ttft_splice_s": spliced.seconds, "compose_s": rec["compose_s"], "write_s": rec["write_s"]}
    return rows, timing


def run_engine(job: Job, store: Path, batch: list[dict]) -> Iterator[tuple[str, list[dict], list[dict]]]:
    """Each item of ``batch`` through vLLM on the job's checkpoint: (item id, its rows, its timing record)."""
    from kamera.engine.vllm import EngineSession

    session = EngineSession(job.checkpoint, store / job.dtype, dtype=job.dtype, max_model_len=1024)
    try:
        session.run(batch[0]["prefix"] + batch[0]["A"])  # warm-up (the first step compiles kernels)
        for item in batch:
            rows, timing = engine_item(session, job.model, item, job.dtype)
            yield item["item_id"], rows, [timing]
    finally:
        session.close()
        gc.collect()


# ----- kamera's own splice on the same checkpoint -----------------------------------------------------
def encoded(adapter: Adapter, item: dict) -> Encoded:
    """The item's spans as the adapter encodes them, from token ids (the checkpoint has no tokenizer)."""
    spans = []
    for role in ("prefix", "A", "B", "query"):
        ids = torch.tensor(item[role], dtype=torch.long)
        n = len(ids)
        spans.append(EncodedSpan(Span(role, (), role), ids, adapter.embed(ids), torch.arange(n)[None], n,
                                 torch.zeros(n, dtype=torch.bool)))
    return Encoded(spans)


def run_own(job: Job, batch: list[dict]) -> Iterator[tuple[str, list[dict], list[dict]]]:
    """Each item of ``batch`` through kamera's own splice on the job's checkpoint: (item id, its rows, no timing)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    name, dtype = job.model, job.dtype
    lm = AutoModelForCausalLM.from_pretrained(job.checkpoint, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    adapter = ADAPTERS[AutoConfig.from_pretrained(job.checkpoint).model_type](lm, None, name=name)
    for item in batch:
        ctx = ReuseContext(adapter, encoded(adapter, item))
        t0 = time.perf_counter()
        ref = ctx.reprefill_logits
        rows = [row("own", name, dtype, item, "reprefill", ref, ref, time.perf_counter() - t0,
                    ulp_stats(ctx.conditioned, ctx.conditioned))]
        for arm in ARMS[1:]:
            t0 = time.perf_counter()
            if arm == "unrotated":
                b_kv = ChunkKV(ctx.canonical.specs, ctx.canonical.layers, ctx.native_positions(ctx.b))
            elif arm == "blind":
                b_kv = ctx.relocated
            else:
                b_kv = family_rank_view(ctx.patch, rank_of(arm), adapter.attention).apply(ctx.relocated)
            logits = ctx.query(b_kv, tag=arm).logits
            rows.append(row("own", name, dtype, item, arm, logits, ref, time.perf_counter() - t0,
                            ulp_stats(b_kv, ctx.conditioned)))
        yield item["item_id"], rows, []
    del lm, adapter
    gc.collect()


def jobs_of(models: dict[str, Path], dtypes: list[str]) -> list[Job]:
    """Every source for every model (label → checkpoint) and dtype, in the order they run: kamera's own splice where
    :data:`ADAPTERS` has the family (the text twins; the VL twins' own splice needs the adapter's image encoding,
    which these token-id items do not go through), then vLLM."""
    def sources(model: Path) -> tuple[str, ...]:
        family = json.loads((Path(model) / "config.json").read_text()).get("model_type")
        return SOURCES if family in ADAPTERS else ("vllm",)

    return [Job(source, name, model, dtype) for name, model in models.items() for dtype in dtypes
            for source in sources(model)]


def measure(out: Path, models: dict[str, Path], n_items: int, dtypes: list[str], seed: int = 0) -> tuple[Path, ...]:
    """Compute the items the jobs' shards under <out>/shards lack (:mod:`kamera.engine.rows`) and write the view;
    returns <out>/rows.csv, <out>/timing.csv and <out>/meta.json."""
    def rows_of(job: Job, todo: list[dict]) -> Iterator[tuple[str, list[dict], list[dict]]]:
        return run_own(job, todo) if job.source == "own" else run_engine(job, out / "store" / job.model, todo)

    def info(job: Job) -> dict:
        return {"device": platform.machine(), "dtype": job.dtype, "attention": "vllm" if job.source == "vllm" else "sdpa",
                "threads": torch.get_num_threads()}

    return run_jobs(out, jobs_of(models, dtypes), items(n_items, seed), seed, ARMS, rows_of, info)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/raw/engine/fig12_tiny"),
                    help="the folder of the shards, the view (rows.csv, timing.csv, meta.json), checkpoints and page store")
    ap.add_argument("--model", type=Path, default=None, help="a checkpoint directory (default: the tiny checkpoints)")
    ap.add_argument("--families", default=",".join(CHECKPOINTS), help="the tiny checkpoints to run, of "
                    f"{', '.join(CHECKPOINTS)}")
    ap.add_argument("--items", type=positive, default=16)
    ap.add_argument("--seed", type=int, default=0, help="the items' seed")
    ap.add_argument("--dtypes", type=dtype_list, default="float32,bfloat16", help="of float32, bfloat16")
    ap.add_argument("--check", action="store_true", help="preflight the model for the engine path and stop")
    ap.add_argument("--models", nargs="+", default=[], help="with --check: registry models to preflight (conf/model)")
    ap.add_argument("--status", action="store_true", help="print each job's shard and how far it is, run nothing")
    args = ap.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check and importlib.util.find_spec("vllm") is None:
        raise SystemExit("engine preflight: vLLM is not installed in this env, so nothing can be served: run it in the "
                         "engine venv (make engine-venv; ~/.cache/kamera/venv-engine/bin/python)")
    if args.models:
        refused = []
        for name in args.models:
            try:
                preflight_model(name)
            except EngineError as err:
                refused.append(str(err))
        if refused:
            raise SystemExit("engine preflight:\n- " + "\n- ".join(refused))
        print(f"the engine connector serves {', '.join(args.models)}")
        return
    try:
        with folder_lock(args.out):  # the tiny checkpoints are written into the folder too
            run(args)
    except (EngineRowsError, ShardCorruptError, EngineError) as err:
        raise SystemExit(f"engine: {err}") from None


def positive(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of items")
    return value


def dtype_list(text: str) -> list[str]:
    """argparse type: a comma-separated list of float32 / bfloat16."""
    dtypes = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in ("float32", "bfloat16")]
    if bad or not dtypes:
        raise argparse.ArgumentTypeError(f"{','.join(bad) or 'nothing'}: the engine rows run float32 and / or bfloat16")
    return dtypes


def run(args: argparse.Namespace) -> None:
    """Everything but the registry preflight, with the output folder held."""
    from transformers import AutoConfig

    if args.model:
        if not (args.model / "config.json").is_file():
            raise SystemExit(f"--model {args.model}: not a checkpoint directory (no config.json)")
        models = {args.model.name: args.model}
    else:
        unknown = set(args.families.split(",")) - set(CHECKPOINTS)
        if unknown:
            raise SystemExit(f"--families: {sorted(unknown)} unknown; the tiny checkpoints are {', '.join(CHECKPOINTS)}")
        models = {f"tiny_{f}": CHECKPOINTS[f](args.out / "checkpoints") for f in args.families.split(",")}
    for model in models.values():
        try:
            config = AutoConfig.from_pretrained(model)
        except (OSError, ValueError) as err:
            raise SystemExit(f"--model {model}: its config does not load: {str(err).splitlines()[0]}") from None
        preflight(config)
    if args.check:
        print(f"{', '.join(map(str, models.values()))}: the engine connector serves it")
        return
    dtypes = args.dtypes
    if args.status:
        for p in plan(args.out, jobs_of(models, dtypes), items(args.items, args.seed), args.seed, ARMS):
            print(f"{p.shard.key} {p.job}: {p.state.summary()} ({p.shard.path})")
        return
    paths = measure(args.out, models, args.items, dtypes, args.seed)
    print("wrote", *paths)

if __name__ == "__main__":
    main()
