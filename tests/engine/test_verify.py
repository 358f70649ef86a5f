"""``python -m kamera.engine.verify``: passes on a served tiny family and fails on a broken connector."""

from __future__ import annotations

import pytest

from kamera.core import ChunkKV

pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
pytestmark = pytest.mark.engine


def test_verify_passes_on_a_served_family_and_fails_when_the_connector_does_not_rotate(monkeypatch, capsys, tmp_path):
    from kamera.engine import plan
    from kamera.engine.verify import main

    assert main(["--family", "qwen2", "--store", str(tmp_path / "ok")]) == 0
    said = capsys.readouterr().out
    assert "16 passed, 0 failed" in said and "FAIL" not in said.replace("0 failed", "")
    # the mutation: the connector places B without R(δ) (positions moved, keys not rotated)
    monkeypatch.setattr(
        plan, "relocate", lambda chunk, delta: ChunkKV(chunk.specs, chunk.layers, chunk.positions + delta)
    )
    assert main(["--family", "qwen2", "--store", str(tmp_path / "broken")]) == 1
    said = capsys.readouterr().out
    assert "FAIL  relocation at layer 0" in said and "FAIL  full rank = re-prefill: KV" not in said


def test_verify_bf16_on_a_checkpoint_path_checks_the_exact_rotation_and_fails_on_a_wrong_delta(
    monkeypatch, capsys, tmp_path
):
    """``--model DIR`` (a checkpoint by path), bfloat16: relocation is within one bf16 ULP of the exact float64 R(δ) of
    the stored page on every element and layer; the distance to vLLM's own bf16 prefill is printed, not gated. The
    mutation: the connector turns B by δ + 1."""
    from kamera.engine import plan
    from kamera.engine.checkpoint import CHECKPOINTS
    from kamera.engine.verify import main

    model = CHECKPOINTS["qwen2"](tmp_path / "ckpt", dtype="bfloat16")
    assert main(["--model", str(model), "--dtype", "bfloat16", "--store", str(tmp_path / "ok")]) == 0
    said = capsys.readouterr().out
    assert "PASS  relocation = exact R(δ) of the stored page" in said and "17 passed, 0 failed" in said
    assert "PASS  relocation vs the engine's bf16 prefill, layer 0 (reported)" in said and f"verify: {model}" in said
    real = plan.relocate
    monkeypatch.setattr(
        plan,
        "relocate",  # keys turned by δ + 1, positions placed right
        lambda chunk, delta: ChunkKV(chunk.specs, real(chunk, delta + 1).layers, chunk.positions + delta),
    )
    assert main(["--model", str(model), "--dtype", "bfloat16", "--store", str(tmp_path / "broken")]) == 1
    assert "FAIL  relocation = exact R(δ) of the stored page" in capsys.readouterr().out


def test_the_connector_takes_vllms_current_constructor_contract():
    """vLLM's factory (0.32 CPU and 0.33 alike, ``kv_connector/factory.py``) refuses an external connector whose
    constructor lacks ``kv_cache_config``; it then calls ``cls(config, role, kv_cache_config)``."""
    import inspect

    from vllm.utils.func_utils import supports_kw

    from kamera.engine.vllm import KameraConnector

    assert supports_kw(KameraConnector, "kv_cache_config")
    assert list(inspect.signature(KameraConnector.__init__).parameters) == [
        "self",
        "vllm_config",
        "role",
        "kv_cache_config",
    ]
