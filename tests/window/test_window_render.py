"""The window renderers on fixed rows: golden markdown (and LaTeX) for Table 1, Table 2, the turnover figure,
App. D and App. E, byte-identical figures, and the edge cases: a model missing probes (tiny_kimi: no
survivor, reorder, excess or fork rows), items without a measurable deficit (η NaN), a model with one item
(tiny_qwen3_vl), the paper's values beside a paper model's (qwen2_5_vl_7b)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from experiments import appd, appe, table1, table2, turnover

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FOOTER = "rows: fixed"
MODELS = {"qwen2_5_vl_7b": ("qwen2_5_vl", "GQA", 3), "tiny_qwen3_vl": ("qwen3_vl", "GQA", 1),
          "tiny_kimi": ("kimi_k25", "MLA", 2)}
MISSING = {"tiny_kimi": {"survivor", "reorder", "excess", "forks"}}


def row(model: str, item: int, probe: str, setting: str, variant: str, eta: float, **cols) -> dict:
    """One window row; KL follows from η and a KL_blind (item 1 has no measurable deficit)."""
    family, attention, _ = MODELS[model]
    kl_blind = 1e-6 if item == 1 else 0.5 + 0.1 * item
    kl = 0.0 if variant == "reprefill" else kl_blind * (1 - eta)
    return {
        "shape": "window", "model": model, "family": family, "attention": attention, "item_id": f"{model}-{item}",
        "probe": probe, "arm": probe, "setting": setting, "variant": variant, "kl": kl, "kl_blind": kl_blind,
        "eta": math.nan if item == 1 else (1.0 if variant == "reprefill" else eta),
        "flip": item % 2 == 0, "recovered": eta > 0.5, "correct": float(eta > 0.5), "bytes": 1000 * (1 - eta / 2),
        "bytes_frac": 1 - eta / 2, "forwards": int(variant in ("reprefill", "fresh_exact", "patch", "patch_deep")),
        "stored_forwards": 1, **cols,
    }


def fixed_rows() -> pd.DataFrame:
    rows = []
    for model, (_, _, n) in MODELS.items():
        skip = MISSING.get(model, set())
        for i in range(n):
            d = 0.05 * i + (0.1 if model == "tiny_kimi" else 0.0)
            for tau in (0.0, 0.5, 1.0):
                for variant, eta in (("reprefill", 1), ("blind", 0), ("stale_patch", 1 - 1.5 * tau - d),
                                     ("stored_patch", 1 - 1.5 * tau - d), ("fresh_exact", 0.95 - d)):
                    rows.append(row(model, i, "recall", f"tau={tau:g}", variant, eta, tau=tau))
            if "survivor" not in skip:
                for variant, eta in (("blind", 0), ("keep_as_is", 0.8 - d), ("removal_patch", 0.97 - d)):
                    rows.append(row(model, i, "survivor", "survivor=3", variant, eta, eta_keep=0.85 - d))
            rows.append(row(model, i, "leading", "lead", "leading", math.nan, kl=1e-15, kl_blind=1e-15, forwards=0))
            for variant, eta, size in (
                ("reprefill", 1, 4000),
                ("patch", 0.96 - d, 2000),
                ("patch_deep", 0.9 - d, 1000),
            ):
                rows.append(row(model, i, "deep_half", "deep=0.5", variant, eta, bytes=size, bytes_frac=size / 4000))
            if "reorder" not in skip:
                rows.append(row(model, i, "reorder", "K=3 order=102", "orbit", 0.9 - d, stored_forwards=6))
            for s in range(3):
                for variant, eta in (
                    ("blind", 0),
                    ("stale", 1 - 0.4 * s),
                    ("patch_update", 0.93 - d),
                    ("deep_refresh", 0.95 - 0.01 * s),
                    ("shallow_refresh", 0.9 - 0.3 * s),
                ):
                    rows.append(
                        row(
                            model,
                            i,
                            "refresh",
                            f"d={s}",
                            variant,
                            eta,
                            swapped=s,
                            n_layers=4,
                            recomputed_layers=3 if variant == "deep_refresh" else 1,
                        )
                    )
            for p, div in (("reorder", 0.1), ("replace_all", 0.43)):
                for variant, eta in (("blind", 0), ("transfer", 1 - 5 * div - d), ("exact", 0.95 - d)):
                    rows.append(row(model, i, "divergent", p, variant, eta, perturbation=p, divergence=div + d))
            if "excess" not in skip:
                for s in range(2):
                    for variant, eta in (
                        ("blind", 0),
                        ("stale_matched", 0.93 - 0.2 * s),
                        ("stale_superset", 0.9 - 0.5 * s),
                        ("rebuilt", 0.92),
                    ):
                        rows.append(row(model, i, "excess", f"d={s}", variant, eta, distractors=s))
            for variant, eta in (("reprefill", 1), ("patch", 0.96), ("revert", 0.0), ("readd", 0.96)):
                rows.append(
                    row(
                        model,
                        i,
                        "revert",
                        "rank=32",
                        variant,
                        eta,
                        bytes=4000 if variant == "reprefill" else 0,
                        exact_kv=i != 2 or variant != "readd",
                        exact_logits=True,
                        bytes_written=4000,
                    )
                )
            for variant, eta in (("reprefill", 1), ("patch_on", 0.96), ("patch_off", 0.0)):
                rows.append(
                    row(
                        model,
                        i,
                        "disposability",
                        "rank=32",
                        variant,
                        eta,
                        call_correct=i != 2,
                        disposable=i % 2 == 1,
                        load_bearing=i % 2 == 0,
                        decode_forwards=1,
                    )
                )
            if "forks" not in skip:
                for b in range(3):
                    rows.append(
                        row(
                            model,
                            i,
                            "forks",
                            f"branch={b}",
                            "fork",
                            0.95,
                            bytes=250,
                            bytes_shared=4000,
                            bytes_duplicated=4000,
                            shares_canonical=True,
                        )
                    )
    return pd.DataFrame(rows)


TABLES = {"table1": table1, "table2": table2, "appe": appe}


@pytest.mark.parametrize("name", list(TABLES))
def test_window_tables_render_the_golden_markdown_and_latex(name, tmp_path):
    md, paths = TABLES[name].render(fixed_rows(), "golden", tmp_path / name, FOOTER)
    assert md == (GOLDEN / f"{name}.md").read_text()
    assert paths[1].read_text() == (GOLDEN / f"{name}.tex").read_text()
    assert md.rstrip().endswith(f"_{FOOTER}_") and paths[1].read_text().startswith(f"% {FOOTER}")


def test_table1_edge_cases_and_the_papers_values():
    t = table1.frame(fixed_rows())
    assert list(t.index) == ["qwen2_5_vl_7b", "tiny_qwen3_vl", "tiny_kimi"]  # the paper's model first
    assert "(paper -0.68)" in t.at["qwen2_5_vl_7b", "stale η (τ = 1)"]
    assert "(paper stale 0.25, fresh 0.75)" in t.at["qwen2_5_vl_7b", "flip-recover stale / stored / exact"]
    assert "(paper 0.87)" in t.at["qwen2_5_vl_7b", "exact η (τ = 1)"]  # the paper's fresh is re-formed at recall
    assert "paper" not in t.at["qwen2_5_vl_7b", "stored η (τ = 1)"]
    assert t.at["qwen2_5_vl_7b", "forwards at the recall stale / stored / exact"] == "0.00 / 0.00 / 1.00"
    assert t.at["tiny_qwen3_vl", "arch"] == "deepstack" and t.at["tiny_qwen3_vl", "n"] == 1
    assert t.at["tiny_qwen3_vl", "exact η (τ = 1)"].startswith("0.95 [0.95, 0.95] (med 0.95, n 1)")
    assert t.at["tiny_kimi", "n (survivor)"] == 0 and t.at["tiny_kimi", "keep-as-is KL"] == "–"
    assert t.at["tiny_kimi", "removal η vs keep-as-is"] == "– (no measurable deficit)"
    assert "n 2" in t.at["qwen2_5_vl_7b", "stale η (τ = 1)"]  # item 1 has no measurable deficit: 2 of 3 count


def test_table2_measures_every_point_and_marks_what_a_model_lacks():
    t = table2.frame(fixed_rows())
    assert [p for p, *_ in table2.POINTS] == list(dict.fromkeys(t.index.get_level_values(0)))
    kimi = t.xs("tiny_kimi (MLA)", level="model")
    assert kimi.at["reorder orbit-patch", "η mean [95% CI]"] == "–"
    assert (
        "0.93× the full patch's η at 0.50× its bytes"
        in t.at[("deep-half patch", "qwen2_5_vl_7b (GQA)"), "η mean [95% CI]"]
    )
    assert "0.75 of the layers recomputed" in t.at[("partial forward", "qwen2_5_vl_7b (GQA)"), "η mean [95% CI]"]
    assert t.at[("leading-segment reuse", "qwen2_5_vl_7b (GQA)"), "η mean [95% CI]"] == "– (no measurable deficit)"


def test_appe_counts_checks_per_model():
    t = appe.frame(fixed_rows())
    assert t.at["re-add: KV and query bitwise the patched cache", "qwen2_5_vl_7b (GQA)"] == "2/3"
    assert t.at["forks: bytes per branch vs a duplicated page", "tiny_kimi (MLA)"] == "–"
    assert (
        t.at["forks: all branches, shared canonical + patches vs duplicated pages", "qwen2_5_vl_7b (GQA)"]
        == "0.40× over 3.0 branches"
    )


FIGURES = {"turnover": turnover, "appd": appd}


@pytest.mark.parametrize("name", list(FIGURES))
def test_window_figures_are_byte_identical_with_the_golden_data_table(name, tmp_path):
    def draw(stem):
        if name == "appd":  # the App. D table and figure come from one render
            return appd.render(fixed_rows(), "golden", tmp_path / f"{stem}_table", tmp_path / stem, FOOTER)
        return turnover.render(fixed_rows(), "golden", tmp_path / stem, FOOTER)

    (md, paths), (_, again) = draw("a"), draw("b")
    for p, q in zip(paths, again, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.suffix
    if name == "appd":
        assert md == (GOLDEN / "appd.md").read_text() and paths[1].read_text() == (GOLDEN / "appd.tex").read_text()
        assert "−3.5 (divergence 0.43)" in md and "| tiny_kimi (MLA) | excess |" not in md
        paths = paths[2:]
    assert paths[0].read_bytes().startswith(b"%PDF") and b"CreationDate" not in paths[0].read_bytes()
    assert paths[2].read_text() == (GOLDEN / f"{name}_figure.md").read_text()


def test_renderers_refuse_rows_without_their_probes(tmp_path):
    arm_rows = pd.DataFrame([{"model": "m", "arm": "blind", "kl": 0.1}])  # an arm job's rows: nothing to draw
    for name, module in {**TABLES, "turnover": turnover}.items():
        with pytest.raises(SystemExit, match="no"):
            module.render(arm_rows, "g", tmp_path / name)
    with pytest.raises(SystemExit, match="no divergent, excess, refresh or recall"):
        appd.render(arm_rows, "g", tmp_path / "t", tmp_path / "f")
