"""The real tier's identity suite (kamera.real.identities) on the tiny Gemma 3 twin, in the gate: every check holds,
and each check fails when the identity it names is broken (relocation without R(δ), a rank-0 patch that moves B)."""

from __future__ import annotations

import pytest

import kamera.real.identities as ident
from kamera.data.registry import load_items


@pytest.fixture(scope="module")
def twin(tiny):
    return tiny("tiny_gemma3")


@pytest.fixture(scope="module")
def spans():
    return load_items("binding_words", subset="two_hop", n_items=1, seed=0)[0].spans()


def by_name(checks: list[ident.Check]) -> dict[str, ident.Check]:
    return {c.name: c for c in checks}


def test_every_identity_holds_on_the_tiny_gemma3_twin(twin, spans):
    checks, info = ident.item_checks(twin, spans)
    names = [c.name for c in checks]
    assert [n for n in names if n.startswith("relocation")] == [
        "relocation R(97) = prefill at +97, global",
        "relocation R(97) = prefill at +97, sliding",
    ]
    assert "layer driver: all rows recomputed = KV(B|A)" in names
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    assert info["kl_blind"] > 0 and 0.0 <= info["energy_share_sliding"] <= 1.0


def test_relocation_without_the_rotation_fails(twin, spans, monkeypatch):
    monkeypatch.setattr(ident, "relocate", lambda kv, delta: kv)  # B's keys left at their old positions
    checks = by_name(ident.item_checks(twin, spans)[0])
    assert not checks["relocation R(97) = prefill at +97, global"].ok
    assert not checks["relocation R(97) = prefill at +97, sliding"].ok


def test_a_rank_zero_patch_that_moves_b_fails(twin, spans, monkeypatch):
    from kamera.core.patch import Patch

    real = Patch.truncate
    monkeypatch.setattr(Patch, "truncate", lambda self, m: real(self, 1 if m == 0 else m))
    checks = by_name(ident.item_checks(twin, spans)[0])
    assert not checks["rank 0 = blind: max |logit diff|"].ok
    assert checks["full rank: KL to re-prefill"].ok


def test_the_command_line_exits_one_on_a_broken_identity(twin, spans, monkeypatch, capsys):
    monkeypatch.setattr(ident, "relocate", lambda kv, delta: kv)
    import kamera.models

    monkeypatch.setattr(kamera.models, "load_model", lambda *a, **k: twin)
    assert ident.main(["--path", "tiny", "--items", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  relocation" in out and out.rstrip().endswith("identities: BROKEN")
