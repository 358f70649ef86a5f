"""Each ``_tiny`` twin of Figs. 3, 4, 8, 11, 12 end to end: Hydra's own expansion of the experiment,
every job through the real runner (2 items each, the TTFT probe on two short segments), then the
renderer the config names, reading the stored rows and probe records back. The jobs run once per
session and every test reads them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from experiments import common
from kamera.run import runner
from kamera.sweep import compose_config, expand

pytestmark = pytest.mark.integration  # the session fixture sweeps and renders every twin; make dry runs

ROOT = Path(__file__).resolve().parents[2]
TWINS = ("fig3_tiny", "fig4_tiny", "fig8_tiny", "fig11_tiny", "fig12_tiny")
SMALL = {"fig11_tiny": ["per_bench.synthetic.probes=[{ttft_tiny:{sizes:[16,32],frame_px:112,repeats:1}}]"]}


def overrides(experiment: str, root: Path) -> list[str]:
    return [f"experiment={experiment}", "n_items=2", *SMALL.get(experiment, []), f"paths.results={root}/raw",
            f"paths.outputs={root}/out"]


@pytest.fixture(scope="session")
def swept(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The results root and experiment → its rendered markdown (all twins swept and rendered once)."""
    root = tmp_path_factory.mktemp("tiny_figures")
    out = {}
    for experiment in TWINS:
        args = overrides(experiment, root)
        for job in expand(args):
            runner.run(compose_config(job))
        common.main([*args, "--out", str(root / experiment)])
        for suffix in (".pdf", ".png"):
            assert (root / experiment).with_suffix(suffix).stat().st_size > 0
        out[experiment] = (root / experiment).with_suffix(".md").read_text()
    return root, out


@pytest.fixture
def rendered(swept) -> dict[str, str]:
    return swept[1]


def test_fig3_tiny(rendered):
    md = rendered["fig3_tiny"]
    assert "**toy_binding**: conditioning 0 (layer 0)" in md  # Δ = 0 at the toy's first layer
    assert "*tiny_kimi*" in md and "rows: 3 job(s)" in md and " records" not in md  # every panel has data


def test_fig4_tiny(rendered):
    md = rendered["fig4_tiny"]
    for model in ("toy_binding", "tiny_kimi", "tiny_qwen2_5_vl", "tiny_llava"):
        assert f"| {model} | oracle | 2 | 1 |" in md
    signals = md.split("*(b)")[1]
    assert "tiny_llava | embed_diff" in signals and "toy_binding" not in signals  # the toy has no frame pairs


def test_fig8_tiny(rendered):
    md = rendered["fig8_tiny"]
    for model in ("toy_binding", "tiny_qwen2_5_vl", "tiny_kimi"):
        for basis in ("features", "components"):
            assert f"- {model} · {basis}: 2 item(s)\n" in md


def test_fig11_tiny(rendered):
    md = rendered["fig11_tiny"]
    assert "timed on CPU: not the paper's H100 comparison" in md
    assert "| toy_binding | binding | two_hop | reprefill | 2 |" in md and "| tiny_qwen2_5_vl | cpu | 16 |" in md


def test_fig12_tiny(rendered):
    md = rendered["fig12_tiny"]
    for scheme in ("rope_1d", "mrope_sectioned", "mrope_interleaved"):
        assert f"| {scheme} | float32 | 100000 |" in md and f"| {scheme} | bfloat16 | 1 |" in md
    assert "bf16 floor 1." in md or "bf16 floor 2." in md
    assert "| toy_binding | binding | patch_r64 | 2 | 1.000 | 100.0 |" in md


def test_the_figures_are_make_targets():
    listed = subprocess.run(["make", "-s", "artifacts"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert {"fig3", "fig4", "fig8", "fig11", "fig12"} <= set(listed)
    plan = subprocess.run(["make", "-n", "fig12"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "kamera.sweep --check experiment=fig12_tiny" in plan and "experiments.common experiment=fig12_tiny" in plan


def test_fig11_reads_its_source_experiments_and_names_a_missing_one(swept, tmp_path, capsys):
    root, _ = swept
    args = overrides("fig11_tiny", root)
    common.main([*args, "sources=[fig12_tiny]", "--out", str(tmp_path / "f11")])
    md = (tmp_path / "f11.md").read_text()
    assert "plus source experiment(s) fig12_tiny" in md and "| tiny_kimi | synthetic | bind | patch_r256 | 2 |" in md
    assert "sources fig12_tiny: rows: 8 job(s)" in md
    with pytest.raises(SystemExit, match="reads rows from experiment 'table9', which does not compose"):
        common.main([*args, "sources=[table9]", "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match=r"experiment table3_tiny, which has no stored jobs .* experiment=table3_tiny"):
        common.main([*args, "sources=[table3_tiny]", "--out", str(tmp_path / "x")])
    capsys.readouterr()


def test_an_incomplete_source_stops_the_render_unless_partial(swept, tmp_path, capsys):
    root, _ = swept
    copy = tmp_path / "copy"
    shutil.copytree(root / "raw", copy / "raw")
    shard = next((copy / "raw" / "fig12_tiny").glob("*.json"))
    shard.unlink()  # one job of the source now reads as missing
    args = [*overrides("fig11_tiny", copy), "sources=[fig12_tiny]", "--out", str(tmp_path / "f")]
    with pytest.raises(SystemExit, match=r"1 job\(s\) of its source experiments incomplete"):
        common.main(args)
    common.main([*args, "--allow-partial"])
    assert "sources fig12_tiny: PARTIAL (1 incomplete job(s))" in (tmp_path / "f.md").read_text()
    capsys.readouterr()
