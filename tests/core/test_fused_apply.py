"""The fast operator: Patch.apply (fused relocation or on a relocated canonical) equals a float64 reference.

The reference is Eq. 1 written out plainly: R(δ) in float64 on the canonical's rotary channels,
plus (UΣ)_m V_mᵀ formed in float64 from the same stored factors, rounded once to the storage dtype.
"""

from __future__ import annotations

import pytest
import torch
from tinyfamilies import TINY, standard_spans

from kamera.core import ChannelSpec, ChunkKV, Patch, RotarySpec, deficit, relocate, rotate
from kamera.reuse.context import ReuseContext

GEN = torch.Generator().manual_seed(3)


def rope(layout: str, dim: int, rotary_dim: int) -> RotarySpec:
    inv = 1.0 / 10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    return RotarySpec(layout, inv, rotary_dim)


def case(layout="half", rotary_dim=16, dtype=torch.float32, n=24, layers=3, mrope=False):
    """A canonical at positions 0.. and the conditioned KV δ = 300 further on, with its patch (factors in dtype)."""
    specs = (ChannelSpec("k", 2, 16, rope(layout, 16, rotary_dim)), ChannelSpec("v", 2, 16))
    pos = torch.arange(n)[None].repeat(3 if mrope else 1, 1)
    canonical = ChunkKV(specs, [tuple(torch.randn(n, 2, 16, generator=GEN).to(dtype) for _ in specs)
                                for _ in range(layers)], pos)
    moved = relocate(canonical, 300)
    cond = moved.with_layers([tuple((t.float() + 0.3 * torch.randn(t.shape, generator=GEN)).to(dtype) for t in lc)
                              for lc in moved.layers])
    return canonical, Patch.form(deficit(cond, moved), dtype=dtype)


def reference(patch: Patch, canonical: ChunkKV, delta: int) -> list[tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """Eq. 1 in float64 from the patch's own (rank-truncated, layer-restricted) factors.

    Per layer-channel: (the result, R(δ)·canonical), both float64; the second sets the rounding
    budget of a relocated channel, which the operator stores once in the storage dtype before
    adding the patch (as a deployment does: rotate in place, then the GEMM)."""
    out = []
    for l, chans in enumerate(canonical.layers):
        new = []
        for c, (t, spec) in enumerate(zip(chans, canonical.specs, strict=True)):
            base = t.double() if spec.rotary is None else rotate(t.double(), delta, spec.rotary)
            x = base.clone()
            m = patch.channel_rank(c) if l in patch.patched_layers else 0
            for h, b in enumerate(patch.factors[l][c]):
                corr = b.us[:, :m].double() @ b.vt[:m].double()
                if len(patch.factors[l][c]) == 1:
                    x = x + corr.reshape(x.shape)
                else:
                    x[:, h] += corr
            new.append((x, base))
        out.append(tuple(new))
    return out


def rounding_error(got: torch.Tensor, exact: torch.Tensor, base: torch.Tensor) -> float:
    """Worst |got − exact| over its rounding budget, ≤ 1 meaning "equal to float rounding".

    The budget per entry: one spacing of the storage dtype at the result and at R(δ)·canonical
    (the two values the operator rounds), plus 8 float32 epsilons of the tensor's scale (the
    float32 arithmetic of the rotation and of the GEMM's accumulation)."""
    eps = torch.finfo(got.dtype).eps
    budget = eps * (exact.abs() + base.abs()) + 8 * torch.finfo(torch.float32).eps * exact.abs().max()
    return float(((got.double() - exact).abs() / budget).max())


VARIANTS = [
    dict(layout="half"),
    dict(layout="interleaved"),
    dict(layout="half", rotary_dim=8),  # partial RoPE: the tail passes through
    dict(layout="half", mrope=True),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_and_two_call_apply_equal_the_reference(variant, dtype):
    canonical, patch = case(dtype=dtype, **variant)
    before = [tuple(t.clone() for t in lc) for lc in canonical.layers]
    for granularity in ("layer", "head"):
        full = patch if granularity == "layer" else Patch.form(
            deficit(*_pair(canonical, patch)), "head", dtype=dtype)
        for view in (full.truncate(5), full.truncate(7, rotary_rank=2).restrict([1, 2]), full.truncate(None)):
            exact = reference(view, canonical, 300)
            for got in (view.apply(canonical, 300), view.apply(relocate(canonical, 300))):
                assert torch.equal(got.positions, canonical.positions + 300)
                for lg, le in zip(got.layers, exact, strict=True):
                    for g, (e, base) in zip(lg, le, strict=True):
                        assert g.dtype == dtype
                        assert rounding_error(g, e, base) <= 1.0, (granularity, rounding_error(g, e, base))
    assert all(torch.equal(a, b) for la, lb in zip(before, canonical.layers, strict=True)
               for a, b in zip(la, lb, strict=True))  # the canonical is never written


def _pair(canonical: ChunkKV, patch: Patch) -> tuple[ChunkKV, ChunkKV]:
    """(conditioned, relocated canonical) rebuilt from a full-rank layer patch, to form a head patch."""
    moved = relocate(canonical, 300)
    return patch.apply(moved), moved


def test_apply_shares_what_it_does_not_touch_and_checks_positions():
    canonical, patch = case()
    moved = relocate(canonical, 300)
    zero = patch.truncate(0).apply(moved)
    assert all(a is b for lz, lm in zip(zero.layers, moved.layers, strict=True) for a, b in zip(lz, lm, strict=True))
    fused0 = patch.truncate(0).apply(canonical, 300)
    assert fused0.layers[0][1] is canonical.layers[0][1]  # V: neither rotated nor patched
    torch.testing.assert_close(fused0.layers[0][0], moved.layers[0][0], rtol=0, atol=0)
    deep = patch.truncate(4).restrict([2]).apply(canonical, 300)
    assert deep.layers[1][1] is canonical.layers[1][1] and deep.layers[2][1] is not canonical.layers[2][1]
    with pytest.raises(ValueError, match="different positions"):
        patch.apply(canonical)
    with pytest.raises(ValueError, match="different positions"):
        patch.apply(moved, 300)
    with pytest.raises(TypeError, match="whole number"):
        patch.apply(canonical, 299.5)


def test_apply_takes_non_contiguous_and_mismatched_dtype_inputs():
    canonical, patch = case()
    moved = relocate(canonical, 300)
    strided = moved.with_layers([tuple(t.transpose(0, 1).contiguous().transpose(0, 1) for t in lc)
                                 for lc in moved.layers])
    assert not strided.layers[0][0].is_contiguous()
    a, b = patch.truncate(6).apply(strided), patch.truncate(6).apply(moved)
    assert all(torch.equal(x, y)
               for la, lb in zip(a.layers, b.layers, strict=True) for x, y in zip(la, lb, strict=True))
    low = canonical.with_layers([tuple(t.bfloat16() for t in lc) for lc in canonical.layers])
    out = patch.truncate(6).apply(relocate(low, 300))  # float32 factors on a bf16 cache: computed in float32
    exact = reference(patch.truncate(6), low, 300)
    for c in range(2):
        assert out.layers[1][c].dtype == torch.bfloat16 and rounding_error(out.layers[1][c], *exact[1][c]) <= 1.0


def test_cos_sin_are_cached_per_shift():
    spec = rope("half", 16, 16)
    a = spec.cos_sin(300, torch.device("cpu"), torch.float32)
    assert spec.cos_sin(300, torch.device("cpu"), torch.float32)[0] is a[0]
    assert spec.cos_sin(301, torch.device("cpu"), torch.float32)[0] is not a[0]
    for d in range(1000):
        spec.cos_sin(d, torch.device("cpu"), torch.float32)
    assert len(spec._tables) <= 256  # bounded: a sweep over many items does not grow it without end


@pytest.mark.parametrize("name", TINY)
def test_fused_apply_on_every_tiny_family(tiny, name):
    """Through the real adapters: apply(canonical, δ) equals apply(R(δ)·canonical), and full rank is KV(B|A)."""
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    for m in (4, None):
        patch = ctx.patch.truncate(m)
        fused, two = patch.apply(ctx.canonical, ctx.delta), patch.apply(ctx.relocated)
        for lf, lt in zip(fused.layers, two.layers, strict=True):
            for f, t in zip(lf, lt, strict=True):
                torch.testing.assert_close(f, t, rtol=1e-6, atol=1e-6)
    for lf, lc in zip(fused.layers, ctx.conditioned.layers, strict=True):
        for f, c in zip(lf, lc, strict=True):
            assert float((f - c).norm() / c.norm()) <= 1e-5
