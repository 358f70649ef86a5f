"""Golden outputs of the Figs. 3, 4, 8, 11, 12 renderers on small fixed records (figure_records.py).

Each renderer is a pure function of rows and probe records: its markdown must equal the golden file,
two renders must write byte-identical PDFs and PNGs, a panel without data is drawn empty and said so,
and a figure with no data at all is an error. Regenerate a golden file after an intended change with
``KAMERA_REGOLD=1 python -m pytest tests/diagnostics/test_figures_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from figure_records import (
    fig3_probes,
    fig4_probes,
    fig8_probes,
    fig11_probes,
    fig11_rows,
    fig12_probes,
    fig12_rows,
)

from experiments import fig3, fig4, fig8, fig11, fig12

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
EMPTY = pd.DataFrame()
CASES = {
    "fig3": (fig3.render, EMPTY, fig3_probes),
    "fig4": (fig4.render, EMPTY, fig4_probes),
    "fig8": (fig8.render, EMPTY, fig8_probes),
    "fig11": (fig11.render, fig11_rows(), fig11_probes),
    "fig12": (fig12.render, fig12_rows(), fig12_probes),
}


def check_golden(name: str, md: str) -> None:
    path = GOLDEN / f"{name}.md"
    if os.environ.get("KAMERA_REGOLD"):
        path.write_text(md)
    assert md == path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_renderer_matches_its_golden_markdown_and_is_byte_stable(name, tmp_path):
    render, rows, probes = CASES[name]
    md, paths = render(rows, probes(), "golden", tmp_path / "a")
    _, again = render(rows, probes(), "golden", tmp_path / "b")
    check_golden(name, md)
    assert [p.suffix for p in paths] == [".pdf", ".png", ".md"]
    for p, q in zip(paths, again, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.suffix
    assert b"CreationDate" not in paths[0].read_bytes()


def test_fig3_edge_cases():
    md = (GOLDEN / "fig3.md").read_text()
    toy = md.split("\n*toy_binding*\n")[1]
    assert "| 0 | 1 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | – | – |" in toy  # Δ = 0 at layer 0: all captured, e90 0
    assert "median landmark keys" not in md.split("- **toy_binding**")[1].split("\n")[0]  # no landmarks records
    assert "median landmark keys 7.5 (7.5% of A)" in md  # kimi: per-layer medians 5.5, 7.5, 9.5


def test_partial_footer_and_missing_panels(tmp_path):
    md, _ = fig4.render(EMPTY, fig4_probes().query("probe != 'video_signals'"), "g", tmp_path / "x",
                        footer="PARTIAL (1 incomplete job(s)). rows: x")
    assert "Fig. 4 (g, partial)" in md and "no video_signals records" in md and md.rstrip().endswith("rows: x_")
    md, _ = fig12.render(fig12_rows(), EMPTY, "g", tmp_path / "y")
    assert "no relocation records" in md and "*(c)" in md
    md, _ = fig11.render(EMPTY, fig11_probes(), "g", tmp_path / "z")
    assert "no rows with bytes" in md and "×prefill" in md


def test_fig12_draws_the_dtype_kl_floor_per_backbone(tmp_path):
    """Panel (a)'s dotted floor is each model's median KL of the full-rank patch in its dtype, drawn across its bars
    and printed per row; without patch_full rows there is no floor (no line, "–")."""
    rows = fig12_rows()
    floors = fig12.kl_floor(fig12.labelled(rows))
    assert floors.to_dict() == pytest.approx({"kimi_vl_a3b": 5e-5, "qwen2_5_vl_7b · bfloat16": 5e-5})  # 2e-5 · (1 + i)
    md, _ = fig12.render(rows, EMPTY, "g", tmp_path / "f")
    assert "| kimi_vl_a3b | blind | 4 | 1.25e-01 | 1.25e-01 | 0.50 | 5.00e-05 |" in md
    fig = fig12.plot(fig12.kl_panel(fig12.labelled(rows)), pd.DataFrame(), float("nan"), pd.DataFrame(), "t", floors)
    dotted = [c for c in fig.axes[0].collections if c.get_label() == "dtype floor (full-rank patch)"]
    assert len(dotted) == 1 and [round(float(y), 9) for y in fig.axes[0].collections[-1].get_segments()[0][:, 1]]
    without = rows[rows["arm"] != "patch_full"]
    assert fig12.kl_floor(fig12.labelled(without)).empty
    md, _ = fig12.render(without, EMPTY, "g", tmp_path / "w")
    assert "| kimi_vl_a3b | blind | 4 | 1.25e-01 | 1.25e-01 | 0.50 | – |" in md


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_figure_without_any_data_is_an_error(name, tmp_path):
    render = CASES[name][0]
    with pytest.raises(SystemExit, match="golden has no"):
        render(EMPTY, EMPTY, "golden", tmp_path / "n")


def test_records_of_two_configurations_of_one_probe_are_refused(tmp_path):
    probes = fig4_probes()
    other = probes[probes["probe"] == "selector_recall"].assign(probe="selector_recall[fraction=0.25]")
    with pytest.raises(SystemExit, match="several probe configurations"):
        fig4.render(EMPTY, pd.concat([probes, other]), "g", tmp_path / "x")
