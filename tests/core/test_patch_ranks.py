"""Per-channel patch ranks and bytes: the MLA k_pe band at its own rank, the byte arithmetic, dtype.

Pure tensor math on random deficits (the tiny-family checks are in ``test_mla_patch.py``)."""

from __future__ import annotations

import logging

import pytest
import torch

from kamera.core import ChannelSpec, ChunkKV, Deficit, Patch, RotarySpec, default_rotary_rank

GEN = torch.Generator().manual_seed(11)


def rope(dim: int) -> RotarySpec:
    return RotarySpec("half", 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim), dim)


MLA = (ChannelSpec("c_kv", 1, 512), ChannelSpec("k_pe", 1, 64, rope(64)))
GQA = (ChannelSpec("k", 4, 128, rope(128)), ChannelSpec("v", 4, 128))


def random_deficit(specs, n: int, layers: int = 1) -> Deficit:
    data = [tuple(torch.randn(n, s.heads, s.dim, generator=GEN) for s in specs) for _ in range(layers)]
    return Deficit(specs, data, torch.arange(n))


def page(specs, n: int, layers: int = 1, dtype=torch.bfloat16) -> ChunkKV:
    return ChunkKV(specs, [tuple(torch.zeros(n, s.heads, s.dim, dtype=dtype) for s in specs)] * layers,
                   torch.arange(n))


def test_patch_bytes_at_rank_16_and_64_are_6_and_25_percent_of_the_page_on_either_layout():
    """n_B = 576, bf16 (the ratio does not depend on the dtype or the layer count).

    MLA page per layer: 576 · (512 + 64) = 331 776 numbers. c_KV at rank m stores m·(576 + 512),
    k_pe at ⌈m/4⌉ stores ⌈m/4⌉·(576 + 64):
      m = 16: 16·1088 + 4·640  = 19 968 → 6.02%   (k_pe at m: 16·1728 = 27 648 → 8.33%)
      m = 64: 64·1088 + 16·640 = 79 872 → 24.07%  (k_pe at m: 64·1728 = 110 592 → 33.33%)
    GQA page per layer (K and V of width 4·128 = 512): 576 · 1024 = 589 824; K and V both at m:
      m = 16: 2·16·1088 = 34 816 → 5.90%;   m = 64: 2·64·1088 = 139 264 → 23.61%
    The paper: rank-16 ≈ 6%, rank-64 ≈ 25% "on either layout" (§6, Table 4).
    """
    n = 576
    for specs, attention in ((MLA, "MLA"), (GQA, "GQA")):
        patch = Patch.form(random_deficit(specs, n), dtype=torch.bfloat16)
        full = page(specs, n)
        for m, lo, hi in ((16, 0.055, 0.065), (64, 0.23, 0.26)):
            p = patch.truncate(m, rotary_rank=default_rotary_rank(m, attention))
            assert lo <= p.bytes_fraction(full) <= hi, (attention, m, p.bytes_fraction(full))
        if attention == "MLA":
            p16 = patch.truncate(16, rotary_rank=default_rotary_rank(16, "MLA"))
            assert p16.nbytes_by_channel() == {"c_kv": 16 * (n + 512) * 2, "k_pe": 4 * (n + 64) * 2}
            assert (p16.effective_rank, p16.effective_rotary_rank) == (16, 4)
            assert patch.truncate(16).bytes_fraction(full) == pytest.approx(27648 / 331776)  # k_pe at m: 8.3%


def test_default_rotary_rank():
    assert [default_rotary_rank(m, "MLA") for m in (0, 1, 4, 5, 16, 64, 256)] == [0, 1, 1, 2, 4, 16, 64]
    assert default_rotary_rank(None, "MLA") is None  # full stays full, so full rank still reproduces re-prefill
    assert default_rotary_rank(16, "GQA") == default_rotary_rank(16, "MHA") == 16


def test_rotary_rank_is_a_view_with_its_own_clamp_and_checks(caplog):
    patch = Patch.form(random_deficit(MLA, 40, layers=2))
    p = patch.truncate(8, rotary_rank=2)
    assert p.factors is patch.factors and (p.rank, p.rotary_rank) == (8, 2)
    assert [p.channel_rank(c) for c in range(2)] == [8, 2]
    assert p.nbytes_by_channel() == {"c_kv": 2 * 8 * (40 + 512) * 4, "k_pe": 2 * 2 * (40 + 64) * 4}
    assert p.nbytes() == sum(p.nbytes_by_channel().values())
    energy = p.energy_captured()
    s_kpe = patch.factors[1][1][0].s
    assert energy[(1, "k_pe")] == pytest.approx(float((s_kpe[:2] ** 2).sum() / (s_kpe**2).sum()))
    same = patch.truncate(8)
    assert same.rotary_rank == 8 and same.effective_rotary_rank == 8
    assert patch.truncate(None, rotary_rank=3).effective_rank == 40  # n_B = 40 < both widths
    with caplog.at_level(logging.WARNING, logger="kamera.core.patch"):
        assert patch.truncate(4, rotary_rank=999).effective_rotary_rank == 40
    assert any("999" in r.message for r in caplog.records)
    with pytest.raises(ValueError, match="rotary patch rank must be ≥ 0"):
        patch.truncate(4, rotary_rank=-1)
    with pytest.raises(TypeError, match="rotary patch rank"):
        patch.truncate(4, rotary_rank="4")


def test_patch_reports_its_storage_dtype():
    delta = random_deficit(GQA, 24)
    assert Patch.form(delta).dtype == torch.float32
    assert Patch.form(delta, dtype=torch.bfloat16).truncate(4).dtype == torch.bfloat16
