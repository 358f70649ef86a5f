"""``scripts/gpu_check.py --remote-equivalence`` on a shaped checkpoint
(no remote code: the public-semantics reference)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_check


@pytest.mark.shaped
@pytest.mark.full
def test_remote_equivalence_on_the_shaped_phi_checkpoint(shaped):
    result = gpu_check.remote_equivalence(
        "phi3_5_vision", shaped("phi3_5_vision"), "cpu", "float32", size=(84, 56), num_crops=1
    )
    assert result.ok and "public-semantics reference" in result.reference
    assert result.n_tokens > 313 and result.kl <= 1e-9 and result.top1_agree


@pytest.mark.parametrize(
    ("max_abs", "kl", "top1", "ok"),
    [(1e-5, 1e-9, True, True), (1.0, 1e-9, True, False), (1e-5, 1e-3, True, False), (1e-5, 1e-9, False, False)],
)
def test_a_mismatch_is_reported_and_exits_one(monkeypatch, capsys, max_abs, kl, top1, ok):
    result = gpu_check.Equivalence("phi3_5_vision", "float32", "ref", 10, max_abs, 5.0, kl, top1)
    assert result.ok is ok
    monkeypatch.setattr(gpu_check, "remote_equivalence", lambda *a, **k: result)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--remote-equivalence", "phi3_5_vision", "--dtypes", "float32"])
    with pytest.raises(SystemExit) as code:
        gpu_check.main()
    assert code.value.code == (0 if ok else 1)
    assert ("MISMATCH" in capsys.readouterr().out) is not ok


def test_remote_equivalence_refuses_other_models():
    with pytest.raises(ValueError, match="kimi_vl_a3b"):
        gpu_check.remote_equivalence("tiny_kimi")
