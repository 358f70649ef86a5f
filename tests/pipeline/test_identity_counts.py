"""Issue 19 items 4 and 5: a sweep counts each (model, item, arm) once per cell, and renders and status read
exactly the data copy and checkpoint their overrides name."""

from __future__ import annotations

from pipeline_support import job_config

from experiments import table3
from kamera.run import runner

TINY3 = ("experiment=table3_tiny", "testbed=tiny_llava", "arms=[reprefill,blind]")


def test_a_sweep_over_n_items_counts_each_item_once(tmp_path, capsys):
    """n_items=1,2 are two jobs whose selections share an item: the table's n is 2 distinct items, not 3."""
    results = f"paths.results={tmp_path}/raw"
    for n in (1, 2):
        runner.run(job_config(tmp_path, *TINY3, f"n_items={n}"))
    table3.main([*TINY3, "n_items=1,2", results, "--out", str(tmp_path / "t3")])
    md = (tmp_path / "t3.md").read_text()
    assert "| chance / n | 0.25 / 2 |" in md, md
    assert "rows: 2 job(s)" in md
    capsys.readouterr()


def test_once_per_cell_keeps_other_cells_and_drops_repeats_across_seeds(tmp_path):
    """Hand-built rows: a seed=0,1 sweep's shared item counts once; a canonical_context sweep keeps both."""
    import pandas as pd

    from experiments.common import once_per_cell
    from kamera.sweep.status import JobView

    def view(*overrides):
        return JobView(list(overrides), job_config(tmp_path, *TINY3, *overrides), "k", [], [])

    def rows(*items):
        return pd.DataFrame({"item_id": list(items), "arm": "blind", "knobs": "{}", "job": len(items)})

    seed0, seed1, other = view("seed=0"), view("seed=1"), view("seed=0", "canonical_context=false")
    out = once_per_cell([(seed0, rows("a", "b")), (seed1, rows("b", "c", "d")), (other, rows("a"))], "arm")
    assert sorted(out["item_id"]) == ["a", "a", "b", "c", "d"]
    assert out.set_index("item_id").loc["b", "job"] == 2  # the first job of the sweep's order keeps "b"


def test_render_and_status_read_the_data_copy_their_overrides_name(tmp_path, capsys):
    """Two data copies of one config are two shards; each override reads its own, whichever ran last, and a
    no-op rerun does not flip it; a byte-identical copy reads the shard it shares; the footer names the copy."""
    import shutil

    from kamera.data import make_fixture
    from kamera.sweep.status import sweep_jobs

    a = make_fixture("mm_niah", tmp_path / "a", n=2)
    b = shutil.copytree(a, tmp_path / "b" / "MM-NIAH")
    same = shutil.copytree(a, tmp_path / "c" / "MM-NIAH")
    ann = b / "mm_niah_val" / "annotations" / "reasoning-image.jsonl"
    ann.write_text(ann.read_text().replace("Which way does the camera move", "Where does the camera go"))
    job = ("bench=mm_niah_reasoning", "arms=[blind]", "n_items=2")
    paths = {root: runner.run(job_config(tmp_path, *job, f"bench.root={root}")) for root in (a, b)}
    runner.run(job_config(tmp_path, *job, f"bench.root={a}"))  # a no-op rerun of a: a is now the last run

    def view_of(root):
        (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *job, f"bench.root={root}"])
        return view

    def shard_of(root):
        view = view_of(root)
        return (view.shard.path if view.shard else None), view.state.status

    assert shard_of(b) == (paths[b], "done")
    assert shard_of(a) == (paths[a], "done")
    assert shard_of(same) == (paths[a], "done")  # byte-identical annotations: the same job
    assert shard_of(tmp_path / "nowhere" / "MM-NIAH")[0] is None  # no copy there: nothing to read
    assert [s.path for s in view_of(b).superseded] == [paths[a]]  # listed, never read
    assert {s.path for s in view_of(tmp_path / "nowhere" / "MM-NIAH").superseded} == {paths[a], paths[b]}
    from experiments.common import footer

    line = footer([view_of(b)], [])
    assert f"data {b}" in line and "checkpoint tiny:" in line, line


def test_a_render_reads_the_named_copys_own_shard_before_an_identical_annotation_copys(tmp_path, capsys):
    """Issue 29 item 2: copies X and Y with byte-identical annotation files differing in one image are two jobs;
    ``bench.root=X`` read Y's shard (run later) although X's own existed. X's own shard wins; a copy Z with no shard
    of its own reads the most recent identical-annotation copy's, and the render and status say which."""
    import shutil

    from PIL import Image

    from experiments.common import footer
    from kamera.data import make_fixture
    from kamera.sweep.status import report, sweep_jobs

    x = make_fixture("mm_niah", tmp_path / "x", n=2)
    y = shutil.copytree(x, tmp_path / "y" / "MM-NIAH")
    z = shutil.copytree(x, tmp_path / "z" / "MM-NIAH")
    image = y / "mm_niah_val" / "images" / "obelics" / "reasoning-image-0-0.png"
    Image.new("RGB", Image.open(image).size, (255, 0, 0)).save(image)  # another medium, the same annotations
    job = ("experiment=table3_tiny", "testbed=tiny_llava", "bench=mm_niah_reasoning", "arms=[blind]", "n_items=2")
    paths = {root: runner.run(job_config(tmp_path, *job, f"bench.root={root}")) for root in (x, y)}
    assert paths[x] != paths[y]

    def view_of(root):
        (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *job, f"bench.root={root}"])
        return view

    assert view_of(x).shard.path == paths[x]  # its own, although y ran later
    assert view_of(y).shard.path == paths[y]
    assert view_of(x).stand_in is None
    stand_in = view_of(z)  # no shard of its own: the most recent identical-annotation copy's, said so
    assert stand_in.shard.path == paths[y] and stand_in.stand_in == z
    assert any(str(y) in line and "not" in line and str(z) in line for line in report([stand_in])), report([stand_in])
    assert f"data {y} (read for {z}" in footer([stand_in], [])
    table3.main([*job, f"bench.root={x}", f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "tx")])
    assert f"data {x}" in (tmp_path / "tx.md").read_text()
    capsys.readouterr()
