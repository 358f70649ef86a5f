"""``scripts/gpu_check.py --paper`` (scripts/gpu_paper.py) without a GPU: its pieces on tiny models, its verdicts,
the paper models it builds from their published configs, and its refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kamera.core import ChannelSpec, ChunkKV, Deficit, Patch, RotarySpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_check
import gpu_paper

SCRIPTS = Path(gpu_paper.__file__).parent

TINY_GQA = gpu_paper.MODELS["gqa"][1]


def _ctx(tiny) -> gpu_paper.ReuseContext:
    return gpu_paper.ReuseContext(tiny(TINY_GQA, "bfloat16"), gpu_paper.item(12, 20, torch.Generator().manual_seed(0)))


# ----- the numbers -------------------------------------------------------------------------------------------
def _chunk(n: int, layers: int) -> ChunkKV:
    rot = RotarySpec("half", torch.rand(4), 8)
    specs = (ChannelSpec("k", 2, 8, rot), ChannelSpec("v", 2, 8))
    return ChunkKV(specs, [(torch.randn(n, 2, 8), torch.randn(n, 2, 8)) for _ in range(layers)], torch.arange(n))


def test_apply_bytes_counts_each_touched_channel_once_and_the_factors():
    n, w, e = 5, 16, 4  # tokens, K / V width (2 heads × 8), float32
    chunk = _chunk(n, 2)
    patch = Patch.form(Deficit(chunk.specs, [tuple(t.float() for t in c) for c in chunk.layers], chunk.positions))
    page = 2 * n * w * e  # one channel read and written
    factors = 3 * (n + w) * e  # rank 3: (UΣ)_3 and V_3ᵀ
    assert gpu_paper.apply_bytes(chunk, patch.truncate(3), 7) == 2 * 2 * (page + factors)
    assert gpu_paper.apply_bytes(chunk, patch.truncate(0), 0) == 0  # nothing rotated, nothing patched: shared
    assert gpu_paper.apply_bytes(chunk, patch.truncate(0), 7) == 2 * page  # R(δ) of K only
    assert gpu_paper.apply_bytes(chunk, patch.truncate(3).restrict([1]), 7) == page + 2 * (page + factors)


def test_identities_hold_on_a_tiny_model_and_break_with_a_wrong_patch(tiny, monkeypatch):
    good = gpu_paper.identities(_ctx(tiny))
    assert good["rank0_ok"] and good["full_ok"] and good["rank0_kv_equal"]
    assert good["kl_full"] < good["kl_blind"] / 100 and 0.5 < good["full_ulp_le1"] <= 1
    ctx = _ctx(tiny)
    wrong = Patch.form(ctx.deficit, dtype=ctx.adapter.dtype)
    for chans in wrong.factors:
        for blocks in chans:
            for b in blocks:
                b.us.mul_(-1)  # the deficit's negative: a patch that moves B away from KV(B|A)
    monkeypatch.setattr(ctx, "patch", wrong, raising=False)
    broken = gpu_paper.identities(ctx)
    assert broken["rank0_ok"] and not broken["full_ok"]
    view = gpu_paper.family_rank_view  # a rank view that ignores rank 0: its "rank 0" patch is the full one
    monkeypatch.setattr(gpu_paper, "family_rank_view", lambda patch, m, attention: view(patch, m or None, attention))
    assert not gpu_paper.identities(_ctx(tiny))["rank0_ok"]


def test_relocation_is_within_the_bound_and_a_wrong_rotation_is_caught(tiny, monkeypatch):
    adapter = tiny(gpu_paper.MODELS["interleaved"][1], "bfloat16")
    good = gpu_paper.relocation(adapter, gpu_paper.TINY_PLAN)
    assert good and all(r["ok"] for r in good) and {r["scheme"] for r in good} == {"mrope_interleaved"}
    assert all(r["vector_ulp_max_l0"] <= 2 for r in good)
    true = gpu_paper.relocate
    monkeypatch.setattr(gpu_paper, "relocate", lambda chunk, delta: true(chunk, delta + 1))  # one position too far
    assert not any(r["ok"] for r in gpu_paper.relocation(adapter, gpu_paper.TINY_PLAN))


def test_a_kernel_that_cannot_run_is_reported_and_only_math_or_eager_failing_fails(tiny, monkeypatch):
    def no_kernel(ctx):
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(gpu_paper, "identities", no_kernel)
    rows = {r["kernel"]: r for r in gpu_paper.kernels(tiny(TINY_GQA, "bfloat16"), gpu_paper.TINY_PLAN)}
    assert not any(r["ran"] for r in rows.values()) and "No available kernel" in rows["sdpa flash_attention"]["why"]
    assert {k for k, r in rows.items() if r.get("ok") is False} == {"sdpa math", "eager"}


@pytest.mark.parametrize("rows", [1, 3])
def test_the_grid_span_lays_b_out_as_an_image(tiny, rows):
    name = gpu_paper.MODELS["gqa" if rows == 3 else "mla"][1]
    span = gpu_paper.grid_span(tiny(name), 3, torch.Generator().manual_seed(0))
    assert span.n_tokens == 9 and span.local_pos.shape == (rows, 9)
    if rows == 3:  # t constant, h the row, w the column; the next span starts one grid side on
        assert span.local_pos.tolist() == [[0] * 9, [0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 1, 2] * 3] and span.extent == 3
    else:
        assert span.local_pos.tolist() == [list(range(9))] and span.extent == 9


# ----- the models the GPU run builds -------------------------------------------------------------------------
PUBLISHED = {  # model: (depth, cache channels, rotary scheme, θ), as the published configs give them
    "qwen2_5_vl_7b": (28, "k 4×128, v 4×128", "mrope_sectioned", 1e6),
    "qwen3_vl_8b": (36, "k 8×128, v 8×128", "mrope_interleaved", 5e6),
    "qwen3_omni_30b_a3b": (48, "k 4×128, v 4×128", "mrope_interleaved", 1e6),
    "kimi_vl_a3b": (27, "c_kv 1×512, k_pe 1×64", "rope_1d", 8e5),
}


def test_each_paper_model_builds_from_its_published_config():
    got = {r["model"]: r for r in gpu_paper.published_structures()}
    assert set(got) == {paper for paper, _ in gpu_paper.MODELS.values()} == set(PUBLISHED)
    for name, (depth, channels, scheme, theta) in PUBLISHED.items():
        r = got[name]
        assert gpu_paper.published_depth(name) == depth and f"1 of {depth} layers" in r["built"]
        assert (r["layers"], r["channels"], r["scheme"]) == (1, channels, scheme) and r["theta"] == pytest.approx(theta)


# ----- the report and the verdict --------------------------------------------------------------------------------
def test_a_broken_identity_or_a_failed_section_is_a_failure_and_the_run_goes_on(tmp_path):
    report = gpu_paper.Report(tmp_path, budget_s=60)
    report.add("identities", [{"model": "m", "kl_blind": 1.0, "kl_full": 1.0, "kl_splice_floor": 0.0,
                               "full_ulp_le1": 0.5, "full_vector_ulp_max": 9.0, "rank0_ok": True, "full_ok": False,
                               "paper_kl_patch": 1e-3}])

    def crash():
        raise RuntimeError("the GPU fell over")

    assert report.attempt("kernels", crash) is None
    assert report.attempt("relocation", lambda: iter([[], []])) == []
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(doc["failures"]) == 2 and "full_ok" in doc["failures"][0] and "the GPU fell over" in doc["failures"][1]
    md = (tmp_path / "gpu_check.md").read_text()
    assert "BROKEN" in md and "| m |" in md
    assert "Traceback" in (tmp_path / "gpu_check.log").read_text()


def test_steps_past_the_budget_are_skipped_with_a_note(tmp_path):
    report = gpu_paper.Report(tmp_path, budget_s=1e-9)
    gpu_paper.on_model(report, "gqa", None, {"kernels": lambda a: pytest.fail("ran past the budget")}, True, "cpu")
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "kernels on tiny_qwen2_5_vl skipped" in doc["notes"][0] and not doc["failures"]


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *argv])
    gpu_check.main()


def test_paper_refuses_a_cpu_without_tiny_and_a_missing_gpu(monkeypatch, tmp_path):
    with pytest.raises(SystemExit, match="on a CPU add --tiny"):
        _main(monkeypatch, "--paper", "--device", "cpu", "--out", str(tmp_path))
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="torch sees no GPU"):
            _main(monkeypatch, "--paper", "--device", "cuda", "--out", str(tmp_path))
    for argv in (["--tiny", "--device", "cpu"], ["--paper", "--tiny", "--budget-s", "0"]):
        with pytest.raises(SystemExit) as err:
            _main(monkeypatch, *argv)
        assert err.value.code == 2  # argparse: --tiny goes with --paper; a budget is positive
    assert not list(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.integration
def test_a_tiny_paper_run_writes_its_files_and_exits_zero(monkeypatch, tmp_path):
    with pytest.raises(SystemExit) as code:
        _main(monkeypatch, "--paper", "--tiny", "--device", "cpu", "--sections", "identities", "kernels",
              "--out", str(tmp_path))
    assert code.value.code == 0
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not doc["failures"] and {"env", "models", "identities", "kernels"} <= set(doc["sections"])
    ran = {r["kernel"] for r in doc["sections"]["kernels"] if r["ran"]}
    assert {"sdpa math", "eager"} <= ran  # the CPU serves these two at least
    assert "every identity holds" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.integration
def test_the_device_script_imports_nothing_the_device_image_lacks():
    """The lent GPU's image has no Hydra, omegaconf, submitit, datasets or vLLM (docs/gpu.md)."""
    code = ("import sys; sys.path.insert(0, 'scripts'); import gpu_check, gpu_paper; "
            "print(sorted({m.split('.')[0] for m in sys.modules}))")
    mods = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                         cwd=SCRIPTS.parent).stdout.replace("'", '"')))
    assert {"kamera", "torch", "transformers"} <= mods
    assert not mods & {"hydra", "omegaconf", "submitit", "datasets", "vllm", "av", "cv2", "fitz", "pymupdf"}
