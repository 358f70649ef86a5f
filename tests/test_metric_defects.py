"""Issue 21's definition defects, each pinned by a test that failed before its fix.

1. the window probes' MLA k_pe rank is the patch arm's (one rule, :func:`kamera.core.family_rank_view`);
2. Fig. 11(a) keeps the single-hop control apart from the multi-hop subset;
3. Fig. 3's e90 summary counts only layers whose Δ is above rounding (the ``e90_columns`` rule);
4. the removal patch's e90 uses the cache dtype's rounding floor, not a fixed 1e-5, and Table 1 renders the removal
   deficit's structure (``removal_rel_norm`` shallow → deep, ``removal_e90``), Table 2 the reorder ``delta_rel``;
5. the window tables, Table 3 and Fig. 11(a) resample clusters (questions on one video or document), not rows;
6. Tables 3 and 7 state their selection rule (every valid item up to a cap) and report the n each cell ran on;
7. Fig. 5 sweeps the MLA k_pe rank (⌈m/4⌉, ⌈m/2⌉, m) and shows what the choice costs;
8. Fig. 5 draws ranks clamped to one effective rank once (hollow), not stacked at one x;
   App. C.2's plateau rank is selected by a stated rule, with its cluster-bootstrap CI and a held-out check;
9. ``Adapter.logits`` applies the config's ``final_logit_softcapping``.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from kamera.arms.patch import truncated
from kamera.core import default_rotary_rank, family_rank_view
from kamera.window import WindowContext, make_probe
from kamera.window.benches.synthetic import window_items

WINDOW_PROBES = (("recall", {"taus": (0.0, 1.0)}), ("forks", {}), ("survivor", {}), ("reorder", {}),
                 ("deep_half", {}), ("revert", {}), ("disposability", {}), ("divergent", {}), ("excess", {}),
                 ("refresh", {"n_chunks": 3, "swaps": (0, 2)}))


# ----- defect 1: one rotary-rank rule for arms and window probes -----------------------------------------
def expected_patch_bytes(adapter, rank: int, n_b: int, n_layers: int) -> int:
    """A rank-m patch of an n_B-token chunk on ``n_layers`` layers under the family rule (⌈m/4⌉ on MLA k_pe)."""
    per_layer = 0
    for spec in adapter.specs:
        r = rank if spec.rotary is None else default_rotary_rank(rank, adapter.attention)
        per_layer += min(r, n_b, spec.width) * (n_b + spec.width)
    return per_layer * n_layers * adapter.dtype.itemsize


@pytest.fixture(scope="module")
def kimi_window_rows(tiny):
    adapter = tiny("tiny_kimi")
    wctx = WindowContext(adapter, window_items(adapter, 1, window=3, image_size=56)[0])
    return adapter, {name: make_probe(name, **knobs).run(wctx) for name, knobs in WINDOW_PROBES}


def test_mla_window_probes_give_k_pe_the_patch_arms_rank(kimi_window_rows):
    adapter, rows = kimi_window_rows
    assert adapter.attention == "MLA"
    checked = 0
    for name, got in rows.items():
        for r in got:
            if math.isnan(r["effective_rank"]):
                continue
            layers = adapter.n_layers // 2 if r["variant"] == "patch_deep" else adapter.n_layers
            want = expected_patch_bytes(adapter, int(r["rank"]), r["n_b"], layers)
            assert r["bytes"] == want, (name, r["variant"], r["bytes"], want)
            assert r["effective_rotary_rank"] == min(default_rotary_rank(int(r["rank"]), "MLA"), r["n_b"])
            checked += 1
    assert checked > 10


def test_the_arm_and_the_window_probes_share_one_rank_rule(tiny):
    from tinyfamilies import standard_spans

    from kamera.reuse.context import ReuseContext

    for name in ("tiny_kimi", "tiny_qwen2_5_vl"):
        adapter = tiny(name)
        patch = ReuseContext(adapter, standard_spans(adapter)).patch
        for m in (1, 4, 9, None):
            arm, shared = truncated(patch, m, "auto", adapter.attention), family_rank_view(patch, m, adapter.attention)
            assert (arm.rank, arm.rotary_rank) == (shared.rank, shared.rotary_rank) == \
                (m, default_rotary_rank(m, adapter.attention))
        assert family_rank_view(patch, 8, adapter.attention, rotary_rank=3).rotary_rank == 3


# ----- defect 4: the removal patch's e90 cuts rounding at the cache dtype's floor ----------------------
@pytest.mark.parametrize("name", ("tiny_qwen2_5_vl", "tiny_kimi"))
def test_removal_e90_in_bf16_reports_rounding_as_rank_zero(tiny, name):
    """Δ_remove at layer 0 is rounding (≈ 4e-3 relative in bf16, far above a fixed 1e-5 cut), and with the evicted
    chunk masked and no prefix Δ_remove is rounding on every layer: e90 must be 0 there, not noise's ~n_B/2."""
    import copy
    import dataclasses
    import json

    adapter = copy.copy(tiny(name, "bfloat16"))
    adapter.chat = None
    item = window_items(adapter, 1, window=3, image_size=56)[0]
    keep = next(r for r in make_probe("survivor").run(WindowContext(adapter, item)) if r["variant"] == "keep_as_is")
    rel, e90 = json.loads(keep["removal_rel_norm"]), json.loads(keep["removal_e90"])
    assert max(rel[0]) < 1e-2 and e90[0] == [0] * len(e90[0])  # layer 0: rounding only
    assert min(min(v for v in layer) for layer in rel[1:]) > 0.1 and all(min(layer) > 0 for layer in e90[1:])
    masked = WindowContext(adapter, dataclasses.replace(item, prefix=None))
    keep = next(r for r in make_probe("survivor", mask_evicted=True).run(masked) if r["variant"] == "keep_as_is")
    assert max(max(layer) for layer in json.loads(keep["removal_rel_norm"])) < 1e-2
    assert json.loads(keep["removal_e90"]) == [[0, 0]] * adapter.n_layers


def as_window_rows(adapter, rows: list[dict]) -> pd.DataFrame:
    """Probe rows as a window job stores them (the columns the runner adds: shape, model, family, attention)."""
    return pd.DataFrame(
        [
            {"shape": "window", "model": adapter.name, "family": "kimi_k25", "attention": adapter.attention, **r}
            for r in rows
        ]
    )


def test_removal_structure_is_the_shallow_and_deep_half_and_the_e90_above_rounding():
    from experiments.table1 import removal_structure

    rel = [[0.1, 0.3], [0.2, 0.2], [0.5, 0.7], [0.6, 0.6]]  # 4 layers × 2 channels: shallow mean 0.2, deep 0.6
    e90 = [[0, 0], [3, 5], [10, 12], [11, 40]]  # layer 0 is rounding (e90 0): left out of the median
    got = removal_structure({"removal_rel_norm": json.dumps(rel), "removal_e90": json.dumps(e90)})
    assert got["rel_shallow"] == pytest.approx(0.2) and got["rel_deep"] == pytest.approx(0.6)
    assert got["e90_above"] == 10.5


def test_table1_and_table2_render_the_removal_structure_and_the_reorder_distance(kimi_window_rows):
    """Real survivor and reorder rows of tiny_kimi: Table 1's structure columns and Table 2's orbit cell show the
    numbers the rows carry (they were computed and stored, never shown)."""
    from experiments import table1, table2
    from experiments.table1 import removal_structure

    adapter, rows = kimi_window_rows
    frame = as_window_rows(adapter, rows["survivor"] + rows["reorder"] + rows["recall"])
    t1 = table1.frame(frame).loc[adapter.name]
    removal = [r for r in rows["survivor"] if r["variant"] == "removal_patch"]
    s = removal_structure(removal[0])
    assert t1["Δ_remove rel-norm shallow → deep"].startswith(f"{s['rel_shallow']:.3f} → {s['rel_deep']:.3f}")
    assert t1["Δ_remove e90"].startswith(f"{s['e90_above']:.2f} [")
    orbit = [r["delta_rel"] for r in rows["reorder"] if r["variant"] == "orbit"]
    cell = table2.frame(frame).at[("reorder orbit-patch", f"{adapter.name} (MLA)"), "η mean [95% CI]"]
    assert f"‖Δπ − Δid‖/‖Δid‖ {sum(orbit) / len(orbit):.2f}" in cell and 0 < min(orbit)


# ----- defect 3: Fig. 3's e90 summary counts only layers above rounding ---------------------------------
def fig3_energy(e90_by_layer: dict[int, tuple[float, bool | None]]) -> pd.DataFrame:
    """Two items' content-channel energy records, as the store holds them: e90 per layer and its flag (None:
    no flag record, as written before flags existed); the second item's e90 is one higher."""
    out = []
    for i in range(2):
        for layer, (e90, flag) in e90_by_layer.items():
            base = {"model": "m", "item_id": f"i{i}", "layer": layer, "channel": "v", "role": "content", "rank": None}
            out.append({**base, "rank": 1, "quantity": "energy_captured", "value": 0.5})
            out.append({**base, "quantity": "e90_rank", "value": e90 + i * (e90 > 0)})
            if flag is not None:
                out.append({**base, "quantity": "above_rounding", "value": float(flag)})
    return pd.DataFrame(out).assign(probe="energy", knobs='{"fraction":0.9,"name":"energy"}', dtype="bfloat16")


@pytest.mark.parametrize(
    ("layers", "want"),
    [
        ({0: (20.0, False), 1: (4.0, True), 2: (6.0, True)}, "median e90 rank 5.5"),  # bf16 noise at layer 0: left out
        ({0: (0.0, None), 1: (4.0, None), 2: (6.0, None)}, "median e90 rank 5.5"),  # unflagged: Δ = 0 (e90 0) left out
        ({0: (0.0, False), 1: (0.0, False)}, "median e90 rank 0"),  # no layer above rounding: no direction needed
    ],
)
def test_fig3_e90_summary_leaves_out_layers_below_rounding(tmp_path, layers, want):
    from experiments import fig3

    md, _ = fig3.render(pd.DataFrame(), fig3_energy(layers), "g", tmp_path / "f")
    assert want + " " in md.split("- **m**")[1].split("\n")[0] + " "


def test_energy_records_flag_the_layers_e90_columns_counts(tiny):
    from tinyfamilies import standard_spans

    from kamera.diagnostics.energy import energy_curve
    from kamera.metrics import e90_columns
    from kamera.reuse.context import ReuseContext

    for name in ("tiny_qwen2_5_vl", "tiny_kimi"):
        adapter = tiny(name)
        ctx = ReuseContext(adapter, standard_spans(adapter))
        records = energy_curve(ctx)
        flag = {(r["layer"], r["channel"]): r["value"] for r in records if r["quantity"] == "above_rounding"}
        e90 = [r for r in records if r["quantity"] == "e90_rank"]
        assert len(flag) == len(e90) and set(flag.values()) == {0.0, 1.0}  # layer 0's Δ is rounding here
        assert not any(v for (layer, _), v in flag.items() if layer == 0)
        for role, column in (("content", "e90_nb_content"), ("rotary", "e90_nb_rotary")):
            counted = [r["value"] / ctx.n_b for r in e90 if r["role"] == role and flag[r["layer"], r["channel"]]]
            assert float(pd.Series(counted).median()) == pytest.approx(e90_columns(ctx.patch, ctx.conditioned)[column])


# ----- defect 2: Fig. 11(a) keeps the single-hop control out of the multi-hop points ---------------------
def fig11_rows() -> pd.DataFrame:
    """One model and benchmark, two subsets: multi-hop (blind wrong) and the single-hop control (all right)."""
    out = []
    for subset, blind_right in (("multi_hop", 0.0), ("single_hop", 1.0)):
        for i in range(4):
            for arm, frac, correct in (("reprefill", 1.0, 1.0), ("blind", 0.0, blind_right), ("patch_r16", 0.06, 1.0)):
                out.append(
                    {
                        "model": "kimi_vl_a3b",
                        "dtype": "bfloat16",
                        "bench": "mmlongbench_doc",
                        "subset": subset,
                        "seed": 0,
                        "item_id": f"{subset}{i}",
                        "arm": arm,
                        "knobs": "{}",
                        "bytes": int(frac * 2**23),
                        "bytes_frac": frac,
                        "correct": correct,
                    }
                )
    return pd.DataFrame(out)


def test_fig11_bytes_points_are_per_subset_and_the_axis_says_what_it_plots(tmp_path):
    from experiments import fig11

    points, _ = fig11.bytes_points(fig11_rows())
    blind = points[points["arm"] == "blind"].set_index("subset")["accuracy"]
    assert blind.to_dict() == {"multi_hop": 0.0, "single_hop": 1.0}  # not pooled into 0.5
    md, _ = fig11.render(fig11_rows(), pd.DataFrame(), "g", tmp_path / "f")
    assert "| kimi_vl_a3b | mmlongbench_doc | multi_hop | blind | 4 |" in md
    assert "per reuse context" not in md
    fig = fig11.plot(points, pd.DataFrame(), pd.DataFrame(), "t")
    label = fig.axes[0].get_xlabel()
    assert "reuse context" not in label and "B's KV page" in label
    assert sorted(x for c in fig.axes[0].collections for x in c.get_offsets()[:, 0]) == [0.06, 0.06, 1.0, 1.0]


def test_fig11_paper_bytes_print_beside_the_papers_model_only(tmp_path):
    """The paper's Fig. 11(a) values are Kimi-VL's: a toy or tiny model's rows print "–" beside them."""
    from experiments import fig11

    rows = pd.concat([fig11_rows(), fig11_rows().assign(model="toy_binding")])
    md, _ = fig11.render(rows, pd.DataFrame(), "g", tmp_path / "f")
    kimi = next(
        line for line in md.splitlines() if line.startswith("| kimi_vl_a3b | mmlongbench_doc | multi_hop | patch_r16")
    )
    toy = next(
        line for line in md.splitlines() if line.startswith("| toy_binding | mmlongbench_doc | multi_hop | patch_r16")
    )
    assert kimi.endswith("| 6.2 MB (2.1%) |") and toy.endswith("| – |")


# ----- defect 5: CIs over clustered rows resample the clusters ----------------------------------------
CLUSTERS, PER_CLUSTER = 4, 5


def clustered(value_of: dict[int, float]) -> list[tuple[str, str, float]]:
    """(item, cluster, value): PER_CLUSTER questions per video or document, one value per cluster, so the rows
    inside a cluster are copies of one draw and a row bootstrap sees CLUSTERS × PER_CLUSTER false replicates."""
    return [(f"c{c}q{q}", f"video{c}", value_of[c]) for c in range(CLUSTERS) for q in range(PER_CLUSTER)]


def ci_width(cell: str) -> float:
    lo, hi = cell.split("[", 1)[1].split("]", 1)[0].split(", ")
    return float(hi) - float(lo)


def window_recall_rows(share: bool) -> pd.DataFrame:
    """Table 1 recall rows at τ = 1 (stale and fresh η), clustered by video when ``share``, else one cluster each."""
    out = []
    for item, cluster, v in clustered({0: 0.1, 1: 0.9, 2: 0.3, 3: 0.7}):
        for variant, eta in (("stale_patch", v), ("fresh_exact", 1 - v / 2)):
            out.append(
                {
                    "shape": "window",
                    "model": "m",
                    "family": "qwen2_5_vl",
                    "attention": "GQA",
                    "item_id": item,
                    "cluster_key": cluster if share else item,
                    "probe": "recall",
                    "setting": "tau=1",
                    "variant": variant,
                    "tau": 1.0,
                    "eta": eta,
                    "kl": 1 - eta,
                    "kl_blind": 1.0,
                    "forwards": int(variant == "fresh_exact"),
                    "flip": False,
                    "recovered": True,
                }
            )
    return pd.DataFrame(out)


def accuracy_rows(share: bool) -> pd.DataFrame:
    """Arm rows of one model, subset and arm whose correctness is a property of the document (cluster)."""
    return pd.DataFrame(
        [
            {
                "model": "m",
                "dtype": "bfloat16",
                "bench": "mmlongbench_doc",
                "subset": "two_page",
                "seed": 0,
                "item_id": item,
                "cluster_key": cluster if share else None,
                "arm": "blind",
                "knobs": "{}",
                "n_choices": 4,
                "bytes": 0,
                "bytes_frac": 0.0,
                "correct": v,
            }
            for item, cluster, v in clustered({0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0})
        ]
    )


@pytest.mark.parametrize("where", ("table1", "table3", "fig11"))
def test_cis_over_clustered_rows_are_wider_than_the_row_bootstrap(where):
    """Four clusters of five identical rows: the cluster bootstrap's CI must be wider than the row bootstrap's
    (which treats the 20 rows as independent), and with every row its own cluster both are the row bootstrap."""
    from experiments import fig11, table1, table3

    def cell(share: bool) -> str:
        if where == "table1":
            return table1.frame(window_recall_rows(share)).at["m", "stale η (τ = 1)"]
        if where == "table3":
            return table3.aggregate(accuracy_rows(share)).at[0, "cell"]
        return fig11.bytes_points(accuracy_rows(share))[0].at[0, "cell"]

    clustered_width, row_width = ci_width(cell(True)), ci_width(cell(False))
    assert clustered_width > 1.3 * row_width, (cell(True), cell(False))
    if where == "table1":
        assert "n 20, 4 clusters" in cell(True) and "clusters" not in cell(False)


def test_table8_sweep_band_resamples_clusters():
    from experiments import table8

    def rows(share: bool) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "model": "m",
                    "item_id": item,
                    "cluster_key": cluster if share else None,
                    "arm_name": "shallow_reprefill",
                    "eta": v,
                    "params": json.dumps({"rerun_fraction_effective": 0.5, "computed_fraction": 0.75}),
                }
                for item, cluster, v in clustered({0: 0.2, 1: 0.9, 2: 0.4, 3: 0.7})
            ]
        )

    (_, clustered_ci, _), (_, row_ci, _) = (table8.sweep_band(rows(s))[1] for s in (True, False))
    assert clustered_ci[2] - clustered_ci[1] > 1.3 * (row_ci[2] - row_ci[1])


def test_every_row_its_own_cluster_is_the_row_bootstrap_draw_for_draw():
    from experiments.formats import ci_cell, cluster_labels

    rows = accuracy_rows(share=False)
    assert ci_cell(rows["correct"], clusters=cluster_labels(rows)) == ci_cell(rows["correct"])


def test_a_forks_branches_are_one_draw():
    """Rows of one item (a fork's branches, a refresh at several d) are one cluster: not independent replicates."""
    from experiments.windows import eta_cell

    recs = [{"item_id": f"i{i}", "cluster_key": f"i{i}", "eta": v} for i, v in enumerate((0.2, 0.8)) for _ in range(6)]
    assert ci_width(eta_cell(recs)) > 1.3 * ci_width(
        eta_cell([{**r, "item_id": f"{r['item_id']}-{j}", "cluster_key": None} for j, r in enumerate(recs)])
    )


# ----- defect 6: the n each cell ran on, and the selection rule ----------------------------------------
def test_table3_cells_say_the_n_they_ran_on():
    from experiments import table3

    rows = accuracy_rows(share=True).assign(subset="reasoning-image", model="kimi_vl_a3b")
    rows = pd.concat([rows, rows.assign(arm="patch_r16").iloc[:-3]], ignore_index=True)  # 3 items failed on r16
    t = table3.wide(table3.aggregate(rows))
    col = ("kimi_vl_a3b", "reasoning-image")
    assert t.at["chance / n", col] == "0.25 / 20"
    assert "(n 17)" in t.at["patch_r16", col] and "(n " not in t.at["blind", col]


def test_table7_cells_measured_on_fewer_items_say_so():
    from experiments import table7

    rows = pd.DataFrame(
        [
            {
                "model": "m",
                "item_id": f"i{i}",
                "arm_name": arm,
                "canonical_context": "native",
                "kl": 0.1,
                "kl_oracle": math.nan,
                "e90_nb_content": 0.2,
                "e90_nb_rotary": 0.1,
                "cluster_key": None,
                "rank": math.nan,
                "eta_floor": 1e-4,
            }
            for i in range(4)
            for arm in ("blind", "oracle4d")
        ]
    )
    rows = rows[~((rows["item_id"] == "i3") & (rows["arm_name"] == "oracle4d"))]  # the oracle failed on one item
    cell = table7.model_row(rows, {})
    assert cell["n"] == "4" and cell["loss-KL"].endswith("(n = 3)") and "(n = " not in cell["e90/n_B (V)"]


@pytest.mark.parametrize("name", ("table3", "table7"))
def test_tables_3_and_7_state_their_selection_rule_and_cap_the_papers_n(name):
    from types import SimpleNamespace

    from experiments.panels import selection_note
    from experiments.paper import paper_values
    from kamera.sweep import compose_config

    for experiment in (name, f"{name}_tiny"):
        cfg = compose_config([f"experiment={experiment}"])
        note = selection_note(SimpleNamespace(jobs=[SimpleNamespace(cfg=cfg)]))
        assert note.startswith("Items: every valid item") and f"cap n_items = {cfg.n_items}" in note
    largest = max([m["n"] for m in paper_values(name).get("models", {}).values()] or [61])  # Table 3: n 56 / 61 / 29
    assert compose_config([f"experiment={name}"]).n_items >= largest


# ----- defects 7, 8 and the C.2 plateau: Fig. 5 -----------------------------------------------------------
def row(
    model: str, item: str, arm: str, kl: float, kl_blind: float = 1.0, params: dict | None = None, **values
) -> dict:
    """A Fig. 5 row: the columns its renderer reads (a patch arm when ``arm`` starts with patch_)."""
    patch = arm.startswith("patch_")
    return {
        "model": model,
        "item_id": item,
        "subset": "s",
        "attention": "MLA" if "kimi" in model else "GQA",
        "arm": arm,
        "arm_name": "patch" if patch else arm,
        "kl": kl,
        "kl_blind": kl_blind,
        "params": json.dumps({"layers": "all", "granularity": "layer", **(params or {})} if patch else {}),
        "rank": math.nan,
        "effective_rank": math.nan,
        "effective_rotary_rank": math.nan,
        "bytes_frac": 0.0,
        "cluster_key": None,
        **values,
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def fig5_rows(
    n_b: int = 24, ranks=(1, 2, 4, 8, 16, 32, 64, 128, None), n_items: int = 6, k_pe: int = 16
) -> pd.DataFrame:
    """Patch rows of one GQA and one MLA model with n_B = ``n_b`` (ranks above it clamp), KL halving per rank
    doubling up to full rank (KL ≈ 0), and on MLA the k_pe variants (rotary_rank m/2 and m) besides the default
    ⌈m/4⌉; the GQA model ran the variant arms too (they must be left out of its lines)."""
    out = []
    for model in ("qwen2_5_vl_7b", "kimi_vl_a3b"):
        for i in range(n_items):
            out.append(row(model, f"i{i}", "blind", kl=1.0 + 0.01 * i, cluster_key=f"doc{i // 2}"))
            for m in ranks:
                rules = {"auto": math.ceil(m / 4) if model == "kimi_vl_a3b" and m else m}
                if m in (4, 16):
                    rules |= {"m/2": math.ceil(m / 2), "m": m}
                for rule, rr in rules.items():
                    m_eff = n_b if m is None else min(m, n_b)
                    width = k_pe if model == "kimi_vl_a3b" else n_b  # MLA's k_pe band, else K as wide as B
                    r_eff = min(rr or n_b, n_b, width)
                    kl = (
                        0.0
                        if m_eff == n_b and r_eff >= min(n_b, k_pe)
                        else (1.0 + 0.01 * i) / (2 * m_eff) / (1 + r_eff)
                    )
                    arm = "patch_full" if m is None else f"patch_r{m}"
                    params = {"rank": m} if rule == "auto" else {"rank": m, "rotary_rank": rr}
                    out.append(
                        row(
                            model,
                            f"i{i}",
                            arm if rule == "auto" else f"{arm}_kpe{rr}",
                            kl=kl,
                            kl_blind=1.0 + 0.01 * i,
                            rank=math.nan if m is None else float(m),
                            effective_rank=float(m_eff),
                            effective_rotary_rank=float(r_eff),
                            bytes_frac=(m_eff * 2 + r_eff) / 100,
                            cluster_key=f"doc{i // 2}",
                            params=params,
                        )
                    )
    return frame(out)


def test_fig5_sweeps_the_mla_k_pe_rank_and_leaves_it_out_of_gqa():
    from experiments import fig5
    from kamera.job.spec import build_specs
    from kamera.sweep import compose_config

    labels = [s.label for s in build_specs("arm", compose_config(["experiment=fig5"]).arms)]
    specs = {s.label: s.knobs for s in build_specs("arm", compose_config(["experiment=fig5"]).arms)}
    for m in (4, 16, 64):  # ⌈m/4⌉ (the default), ⌈m/2⌉ and m
        assert f"patch_r{m}" in labels and f"patch_r{m}_kpe{m}" in labels and f"patch_r{m}_kpe{m // 2}" in labels
        assert (
            specs[f"patch_r{m}_kpe{m // 2}"]["rotary_rank"] == m // 2 and specs[f"patch_r{m}"]["rotary_rank"] == "auto"
        )
    frame = fig5.curve(fig5_rows())
    assert set(frame["line"]) == {"qwen2_5_vl_7b", "kimi_vl_a3b", "kimi_vl_a3b · k_pe m/2", "kimi_vl_a3b · k_pe m"}
    at16 = frame[frame["m"] == "16"].set_index("line")
    assert at16.at["kimi_vl_a3b", "r_eff"] == 4 and at16.at["kimi_vl_a3b · k_pe m", "r_eff"] == 16
    assert at16.at["kimi_vl_a3b · k_pe m", "kl_mean"] < at16.at["kimi_vl_a3b", "kl_mean"]  # what ⌈m/4⌉ costs
    md = fig5.to_markdown(frame, "g")
    assert "| kimi_vl_a3b | m/2 |" in md and "| qwen2_5_vl_7b | m/2 |" not in md


def test_fig5_draws_the_ranks_clamped_to_full_rank_once_and_hollow():
    from experiments import fig5

    frame = fig5.curve(fig5_rows())
    gqa = fig5.drawn(frame[frame["line"] == "qwen2_5_vl_7b"])
    assert list(gqa["m_eff"]) == [1, 2, 4, 8, 16, 24]  # 32, 64, 128 and full: one point at n_B, not four
    assert gqa["label"].iloc[-1] == "32=64=128=full" and gqa["clamped"].iloc[-1] == 1
    mla = fig5.drawn(frame[frame["line"] == "kimi_vl_a3b"])  # k_pe ⌈m/4⌉ still grows past the content clamp
    assert list(mla["m"]) == ["1", "2", "4", "8", "16", "32", "64"] and mla["label"].iloc[-1] == "64=128=full"
    fig = fig5.plot(frame, "t")
    hollow = [
        c
        for c in fig.axes[0].collections
        if len(c.get_offsets()) and (c.get_facecolors().size == 0 or c.get_facecolors()[:, 3].max() == 0)
    ]
    assert sum(len(c.get_offsets()) for c in hollow) >= 3  # the clamped points of the three lines that reach n_B
    for line in fig.axes[0].lines:  # a line never runs vertically through the points stacked at one x
        x = list(line.get_xdata())
        assert len(x) == len(set(x)) or len(set(x)) == 1, line.get_label()


def plateau_rows(share_at: dict[int, float], n_items: int = 8, wobble: float = 0.02) -> pd.DataFrame:
    """Items whose patch closes ``share_at[m]`` of the blind gap at rank m (± item noise; m = None: the full-rank
    patch), clustered in pairs."""
    out = []
    for i in range(n_items):
        blind = 1.0 + 0.1 * i
        out.append(row("qwen2_5_vl_7b", f"i{i}", "blind", kl=blind, cluster_key=f"doc{i // 2}"))
        for m, closed in share_at.items():
            noise = wobble * ((i % 3) - 1)
            out.append(
                row(
                    "qwen2_5_vl_7b",
                    f"i{i}",
                    f"patch_r{m}" if m else "patch_full",
                    kl=blind * (1 - min(closed + noise, 1.0)),
                    kl_blind=blind,
                    rank=float(m) if m else math.nan,
                    effective_rank=float(m or 24),
                    cluster_key=f"doc{i // 2}",
                    params={"rank": m},
                )
            )
    return frame(out)


def test_the_plateau_is_the_smallest_rank_closing_the_stated_share_with_a_ci_of_ranks():
    from experiments import fig5

    p = fig5.plateau(plateau_rows({8: 0.6, 16: 0.85, 32: 0.94, 64: 1.0, 128: 1.0})).iloc[0]
    assert p["ref"] == 128 and p["m_star"] == 32 and p["closed"] == pytest.approx(0.94, abs=0.02)
    assert {p["lo"], p["hi"]} <= {8, 16, 32, 64, 128} and p["lo"] <= 32 <= p["hi"]
    assert p["fit_star"] == 32 and p["held_closed"] > 0.9 and p["held_lo"] <= p["held_closed"] <= p["held_hi"]
    assert p["clusters"] == 4
    assert p["r32"] == pytest.approx(0.94, abs=0.02) and p["r32_lo"] <= p["r32"] <= p["r32_hi"]
    md = fig5.to_markdown(
        fig5.curve(plateau_rows({16: 0.85, 32: 0.94, 64: 1.0})),
        "g",
        plateaus=fig5.plateau(plateau_rows({16: 0.85, 32: 0.94, 64: 1.0})),
    )
    assert "| qwen2_5_vl_7b | 8 | 4 | 64 | 32 [" in md and "rank 32 closes of the gap to 64" in md
    unsure = fig5.plateau(plateau_rows({16: 0.895, 32: 0.905, 64: 1.0}, wobble=0.08)).iloc[0]  # straddles 0.9
    assert unsure["lo"] < unsure["hi"]


def test_the_plateau_ci_reaches_past_64_where_the_curve_still_falls():
    """A curve whose rank-64 patch closes 0.85 of the gap to rank 128 (rank 128's KL far below rank 64's): the
    plateau must be 128, on the whole sample and on the resamples. A rank-64 reference (the old rule) could never
    select above 64."""
    from experiments import fig5

    p = fig5.plateau(plateau_rows({8: 0.5, 16: 0.6, 32: 0.7, 64: 0.85, 128: 1.0})).iloc[0]
    assert p["ref"] == 128 and p["m_star"] == 128 and p["hi"] == 128 and p["fit_star"] == 128
    straddle = fig5.plateau(plateau_rows({32: 0.7, 64: 0.9, 128: 1.0}, wobble=0.08)).iloc[0]
    assert straddle["lo"] == 64 and straddle["hi"] == 128  # the CI spans the two ranks the rule hesitates between
    full = plateau_rows({32: 0.7, 64: 0.85, 128: 0.88, None: 1.0})
    top = fig5.plateau(full).iloc[0]
    assert math.isinf(top["ref"]) and math.isinf(top["m_star"])  # nothing below full closes 0.9 of the gap to it
    assert "full [full, full]" in fig5.plateau_lines(fig5.plateau(full))[-1]


def test_plateau_rank_rule_and_its_bad_inputs():
    import numpy as np

    from kamera.metrics import plateau_rank

    kl, blind = np.array([[0.5, 0.09, 0.0], [0.5, 0.11, 0.0]]), np.array([1.0, 1.0])
    assert plateau_rank([8, 16, 64], kl, blind, 64) == 16  # closes 0.90 of the gap on average
    assert plateau_rank([8, 16, 64], kl, blind, 64, share=0.95) == 64
    assert math.isnan(plateau_rank([8, 16, 64], kl, np.zeros(2), 64))  # no gap to close
    with pytest.raises(ValueError, match="reference rank"):
        plateau_rank([8, 16], kl[:, :2], blind, 64)
    with pytest.raises(ValueError, match="items × ranks"):
        plateau_rank([8, 16, 64], kl[:1], blind, 64)


# ----- defect 9: final-logit soft-capping ---------------------------------------------------------------
def test_adapter_logits_apply_the_configs_final_logit_softcapping():
    """A tiny Gemma-2 (its config sets ``final_logit_softcapping``): the adapter's float32 head must give the
    logits transformers' own forward gives, cap·tanh(z / cap), not the raw z (which exceeds the cap)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from kamera.models.text import TextAdapter

    torch.manual_seed(0)
    cfg = Gemma2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        final_logit_softcapping=5.0,
    )
    model = Gemma2ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40)  # logits well past the cap, so the cap matters
        out = model(input_ids=torch.randint(0, 128, (1, 7)), output_hidden_states=True)
    adapter = TextAdapter(model, None, name="tiny_gemma2")
    hidden, ref = out.hidden_states[-1][0, -1], out.logits[0, -1].float()
    raw = torch.mv(model.get_output_embeddings().weight.float(), hidden.float())
    assert raw.abs().max() > 2 * 5.0  # without the cap the logits would leave (-5, 5)
    got = adapter.logits(hidden)
    assert got.abs().max() < 5.0
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, 5.0 * torch.tanh(raw / 5.0), rtol=1e-6, atol=1e-6)
    cfg.final_logit_softcapping = None  # a config without a cap: the head's raw logits, unchanged
    torch.testing.assert_close(adapter.logits(hidden), raw, rtol=0, atol=0)
