"""The real tier's tables and figure, drawn from the rows of ``make real``'s jobs (:mod:`kamera.real.__main__`).

- ``results/tables/real_gemma3_270m.md``: per task (binding two-hop, its two controls, MuSiQue 2-hop) and arm: n,
  accuracy, KL to re-prefill, η (over items whose blind KL exceeds the job's ``eta_floor``), flip-recover (over the
  items blind reuse flips), each with its 95 % seeded percentile bootstrap CI over items (2000 draws,
  :func:`kamera.metrics.bootstrap_ci`), and the cost per arm (bytes over B's page, forwards the arm ran, recomputed
  tokens, seconds per item); arms a model refuses are listed with the reason; then the identity suite's output, the
  sliding-window split and the engine check as they ran;
- ``results/tables/real_gemma3_270m_rank.md``: Fig. 5's curve (KL and η vs patch rank m on the two-hop items) and Fig.
  3(a)'s energy of Δ a rank-m patch captures (mean over items and layers 1…L−1, per channel; layer 0's Δ is
  relocation rounding), with the median e90 rank;
- ``figures/real_gemma3_270m.png`` (+ ``.md``, its data): the two curves.

Every file names the GGUF's sha256 and the commit / versions the rows came from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from kamera.metrics import bootstrap_ci

NAME = "real_gemma3_270m"
RANKS = [
    "patch_r1",
    "patch_r2",
    "patch_r4",
    "patch_r8",
    "patch_r16",
    "patch_r32",
    "patch_r64",
    "patch_r128",
    "patch_full",
]


def _ci(values, fmt: str = "{:.3f}") -> str:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return "–"
    m, lo, hi = bootstrap_ci(vals)
    return f"{fmt.format(m)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def _meta(shard: Path) -> dict:
    try:
        return json.loads(shard.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}


def _footer(shards: dict[str, str], meta: dict) -> str:
    runs = [r for s in shards.values() for r in _meta(Path(s)).get("runs", [])]

    def vals(key):
        return "/".join(dict.fromkeys(str(r.get(key)) for r in runs)) or "?"

    commits = "/".join(dict.fromkeys(f"{str(r.get('commit'))[:10]}{'+dirty' if r.get('dirty') else ''}" for r in runs))
    return (
        f"GGUF {meta['gguf']} sha256 {meta['sha256']} ({meta['package']}), converted to {meta['checkpoint']}; "
        f"rows: commit {commits or '?'}, kamera {vals('kamera')}, torch {vals('torch')}, "
        f"transformers {vals('transformers')}, device {vals('device_name')}, dtype {vals('dtype')}"
    )


def arm_table(rows: pd.DataFrame, arms: list[str]) -> list[str]:
    out = [
        "| arm | n | accuracy | KL to re-prefill | η (n) | flip-recover (k / flipped) | bytes / page | forwards | "
        "recomputed tokens | s / item |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in arms:
        r = rows[rows.arm == arm]
        if r.empty:
            continue
        flipped = r[r.flip.astype(bool)]
        rec = flipped.recovered.astype(float)
        eta = r.eta.dropna()
        out.append(
            f"| {arm} | {len(r)} | {_ci(r.correct.astype(float))} | {_ci(r.kl, '{:.3g}')} | "
            f"{_ci(eta, '{:.3f}')} ({len(eta)}) | {_ci(rec)} ({int(rec.sum())} / {len(flipped)}) | "
            f"{r.bytes_frac.mean():.3f} | {r.forwards.mean():.1f} | {r.recomputed_tokens.mean():.1f} | "
            f"{r.seconds.mean():.2f} |"
        )
    return out


def refusals(shard: Path) -> list[str]:
    seen = {}
    for x in _meta(shard).get("refusals", []) or []:
        seen.setdefault(x.get("arm"), x.get("reason"))
    return [f"- `{a}` refused: {why}" for a, why in seen.items()]


def energy(shard: Path) -> pd.DataFrame:
    """Mean energy captured per (rank, channel role) over items and layers ≥ 1, and the median e90 rank."""
    path = shard.with_name(shard.stem + ".probes.parquet")
    if not path.is_file():
        return pd.DataFrame()
    rec = pd.read_parquet(path)
    rec = rec[(rec.probe == "energy") if "probe" in rec else slice(None)]
    rec = rec[rec.layer >= 1]
    cap = rec[rec.quantity == "energy_captured"].groupby(["role", "rank"]).value.mean().unstack(0)
    cap.index = [str(int(m)) for m in cap.index]  # ranks are integers (parquet keeps them as float)
    cap.loc["e90 (median)"] = rec[rec.quantity == "e90_rank"].groupby("role").value.median()
    return cap


def _main_lines(shards: dict[str, str], meta: dict, arms: list[str], foot: str) -> list[str]:
    """``real_gemma3_270m.md``: per task its arm table and refusals, then the identity suite's output, the live
    engine's check and the step times as they ran, then the footer."""
    lines = [
        "# Gemma 3 270M (real weights): blind reuse vs the patch, Table-3-shaped",
        "",
        "Real trained weights: Gemma 3 270M (pretrained, Q4_K_M GGUF dequantised to float32), run as "
        "`model=hf model.path=<dir> model.chat=none` on CPU. Text tasks only; no claim about the paper's VLM "
        "numbers (docs/real.md). Means with 95% bootstrap CIs over items.",
        "",
    ]
    for name, shard in shards.items():
        rows = pd.read_parquet(shard)
        lines += [f"## {name}", "", *arm_table(rows, arms), *refusals(Path(shard)), ""]
    return [
        *lines,
        "## Identities on the real weights (`python -m kamera.real.identities`)",
        "",
        "```",
        meta["identities"].rstrip(),
        "```",
        "",
        "## Live engine (`python -m kamera.engine.verify --model <dir>`)",
        "",
        f"exit status {meta['engine'].get('rc')}",
        "",
        "```",
        meta["engine"]["output"].rstrip()[-3000:],
        "```",
        "",
        "## Step times (make real)",
        "",
        *[f"- {n}: {s:.1f} s" for n, s in meta["steps"]],
        "",
        foot,
        "",
    ]


def _rank_curve(rows: pd.DataFrame) -> tuple[list[str], list[tuple[str, float, float]]]:
    """Fig. 5's curve on the two-hop rows: the table (blind at rank 0, then each patch rank m in :data:`RANKS` the
    rows hold: KL mean and median, η with its CI, accuracy, bytes over the page) and its points (m, KL mean, KL
    median)."""
    blind = rows[rows.arm == "blind"]
    curve = [
        "| arm | rank m | KL mean | KL median | η (n) | accuracy | bytes / page |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| blind | 0 | {blind.kl.mean():.3g} | {blind.kl.median():.3g} | – | {blind.correct.mean():.3f} | 0 |",
    ]
    points = []
    for arm in RANKS:
        r = rows[rows.arm == arm]
        if r.empty:
            continue
        m = "full" if arm == "patch_full" else arm.removeprefix("patch_r")
        eta = r.eta.dropna()
        curve.append(
            f"| {arm} | {m} | {r.kl.mean():.3g} | {r.kl.median():.3g} | {_ci(eta)} ({len(eta)}) | "
            f"{r.correct.mean():.3f} | {r.bytes_frac.mean():.3f} |"
        )
        points.append((m, r.kl.mean(), r.kl.median()))
    return curve, points


def _energy_table(cap: pd.DataFrame) -> list[str]:
    """Fig. 3(a)'s table: per rank m (and the median e90 rank) the energy of Δ captured, per channel; none
    without the energy probe's records."""
    if cap.empty:
        return []
    roles = list(cap.columns)
    return [
        "| rank m | " + " | ".join(f"energy captured, {c}" for c in roles) + " |",
        "| --- |" + " --- |" * len(roles),
        *[f"| {idx} | " + " | ".join(f"{cap.loc[idx, c]:.3f}" for c in roles) + " |" for idx in cap.index],
    ]


def _rank_lines(n_items: int, curve: list[str], etab: list[str], foot: str) -> list[str]:
    """``real_gemma3_270m_rank.md``: the rank curve and the energy table, on ``n_items`` two-hop items."""
    return [
        "# Gemma 3 270M (real weights): Fig. 5's rank curve and Fig. 3(a)'s energy vs rank",
        "",
        f"binding_words two-hop, {n_items} items; KL to re-prefill of the rank-m patch (both "
        "channels at rank m), blind beside it; energy = the share of ‖Δ‖² a rank-m SVD keeps, mean over items "
        "and layers 1…17 (layer 0's Δ is relocation rounding), per channel (content = V, rotary = K).",
        "",
        *curve,
        "",
        *etab,
        "",
        foot,
        "",
    ]


def _figure_lines(curve: list[str], etab: list[str], foot: str) -> list[str]:
    """``figures/real_gemma3_270m.md``: the data the figure draws."""
    return [
        "# figures/real_gemma3_270m.png: the data drawn",
        "",
        "Left: KL to re-prefill vs patch rank (mean, median; dashed: blind). Right: energy of Δ captured vs rank per "
        "channel.",
        "",
        *curve,
        "",
        *etab,
        "",
        foot,
        "",
    ]


def write(shards: dict[str, str], meta: dict, root: Path, arms: list[str]) -> list[Path]:
    """The three files (module docstring) from the jobs' shards; ``arms`` in the order the arm tables list them."""
    foot = _footer(shards, meta)
    lines = _main_lines(shards, meta, arms, foot)
    tables = root / "results" / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    main = tables / f"{NAME}.md"
    main.write_text("\n".join(lines))

    two_hop = Path(shards["binding two_hop"])
    rows = pd.read_parquet(two_hop)
    curve, points = _rank_curve(rows)
    cap = energy(two_hop)
    etab = _energy_table(cap)
    rank_md = tables / f"{NAME}_rank.md"
    rank_md.write_text("\n".join(_rank_lines(rows.item_id.nunique(), curve, etab, foot)))
    figures = root / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    png = figures / f"{NAME}.png"
    _figure(points, rows[rows.arm == "blind"].kl.mean(), cap, png, foot)
    (figures / f"{NAME}.md").write_text("\n".join(_figure_lines(curve, etab, foot)))
    return [main, rank_md, png, figures / f"{NAME}.md"]


def _figure(points, blind_kl: float, cap: pd.DataFrame, out: Path, foot: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    xs = [256 if m == "full" else int(m) for m, _, _ in points]
    a.plot(xs, [p[1] for p in points], "o-", label="mean")
    a.plot(xs, [p[2] for p in points], "s--", label="median")
    a.axhline(blind_kl, color="grey", ls=":", label="blind (mean)")
    a.set(
        xscale="log",
        yscale="log",
        xlabel="patch rank m (256 = full)",
        ylabel="KL to re-prefill",
        title="Gemma 3 270M, binding two-hop",
    )
    a.legend(fontsize=7)
    if not cap.empty:
        grid = cap.drop(index="e90 (median)", errors="ignore")
        for role in grid.columns:
            b.plot(grid.index.astype(float), grid[role], "o-", label=str(role))
        b.set(xscale="log", xlabel="rank m", ylabel="energy of Δ captured", ylim=(0, 1.02), title="Fig. 3(a) on it")
        b.legend(fontsize=7)
    fig.text(0.0, -0.02, "\n".join([foot[i : i + 170] for i in range(0, len(foot), 170)]), fontsize=4, va="top")
    fig.tight_layout()
    fig.savefig(out, dpi=150, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


__all__ = ["arm_table", "energy", "write"]
