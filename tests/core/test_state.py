"""kamera.core.state: the Gated DeltaNet state composes exactly, its deficit patch is exact at full rank and
nothing at rank 0, and the recurrence is the model's own (transformers' chunked kernel)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

from kamera.core.state import (
    Carry,
    ChunkState,
    DeltaRuleSpec,
    LayerInputs,
    StatePatch,
    compose,
    features,
    fold,
    page,
    scan,
    state_deficit,
)

HK, HV, DK, DV, K = 2, 4, 8, 6, 4
CONV = 2 * HK * DK + HV * DV


@pytest.fixture
def spec() -> DeltaRuleSpec:
    g = torch.Generator().manual_seed(0)
    return DeltaRuleSpec(0, HK, HV, DK, DV, torch.randn(CONV, K, generator=g) * 0.5, torch.randn(HV, generator=g) * 0.3,
                         torch.randn(HV, generator=g) * 0.3)


def inputs(n: int, seed: int) -> LayerInputs:
    g = torch.Generator().manual_seed(seed)
    return LayerInputs(
        torch.randn(n, CONV, generator=g), torch.randn(n, HV, generator=g), torch.randn(n, HV, generator=g)
    )


def cat(*xs: LayerInputs) -> LayerInputs:
    return LayerInputs(*(torch.cat([getattr(x, f) for x in xs]) for f in ("mixed", "b", "a")))


def zero(spec: DeltaRuleSpec) -> Carry:
    return Carry.zero(spec, torch.float32, torch.device("cpu"))


@pytest.mark.parametrize("n_b", [1, 2, 3, 9])  # B shorter than, equal to and longer than the conv boundary
def test_composition_behind_a_equals_the_recurrence_over_a_then_b(spec, n_b):
    """T_B S_A + S(B|0), B's first K − 1 tokens recomputed behind A's inputs = one page over A · B."""
    a, b = inputs(7, 1), inputs(n_b, 2)
    behind_a = compose(spec, compose(spec, zero(spec), page(spec, a)), page(spec, b))
    whole = compose(spec, zero(spec), page(spec, cat(a, b)))
    torch.testing.assert_close(behind_a.state, whole.state, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(behind_a.history, whole.history, rtol=0, atol=0)


def token_by_token(s: torch.Tensor, k, v, beta, g) -> torch.Tensor:
    """The delta rule one token at a time, as written (the reference the chunkwise scan must equal)."""
    s = s.clone()
    for t in range(k.shape[0]):
        s = s * g[t].exp()[:, None, None]
        s = s + k[t][:, :, None] * ((v[t] - torch.einsum("hkw,hk->hw", s, k[t])) * beta[t][:, None])[:, None, :]
    return s


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_the_recurrence_is_the_token_rule_and_transformers_chunked_kernel(spec, chunk):
    """The state after a run = the rule applied token by token = the model's own ``torch_chunk_gated_delta_rule``
    from the same initial state, for values of any width (the augmented [T | S] scan is d_k + d_v wide)."""
    x = inputs(70, 3)  # more than one of the kernel's 64-token chunks
    k, v, beta, g = features(spec, zero(spec).history, x)
    s0 = torch.randn(HV, DK, DV, generator=torch.Generator().manual_seed(4))
    _, ref = torch_chunk_gated_delta_rule(
        torch.zeros_like(k)[None],
        k[None],
        v[None],
        g=g[None],
        beta=beta[None],
        initial_state=s0[None],
        output_final_state=True,
    )
    torch.testing.assert_close(scan(s0, k, v, beta, g, chunk), ref[0], rtol=1e-5, atol=1e-5)
    wide = torch.cat([v, v[..., :2]], dim=-1)
    s_wide = torch.cat([s0, s0[..., :2]], dim=-1)
    torch.testing.assert_close(
        scan(s_wide, k, wide, beta, g, chunk), token_by_token(s_wide, k, wide, beta, g), rtol=1e-5, atol=1e-5
    )


def test_composition_is_linear_in_the_incoming_state(spec):
    """The transition part: compose(S₁) − compose(S₂) depends on S₁ − S₂ only (T_B is a linear map)."""
    p, h = page(spec, inputs(9, 5)), zero(spec).history
    g = torch.Generator().manual_seed(6)
    s1, s2 = torch.randn(HV, DK, DV, generator=g), torch.randn(HV, DK, DV, generator=g)
    diff = compose(spec, Carry(s1, h), p).state - compose(spec, Carry(s2, h), p).state
    lin = compose(spec, Carry(s1 - s2, h), p).state - compose(spec, Carry(s1 * 0, h), p).state
    torch.testing.assert_close(diff, lin, rtol=1e-5, atol=1e-5)


def test_state_patch_full_rank_restores_the_conditioned_state_and_rank_zero_adds_nothing(spec):
    a, b_cond, b_canon = inputs(6, 7), inputs(10, 8), inputs(10, 9)
    before = [compose(spec, zero(spec), page(spec, a))]
    cond = ChunkState((spec,), [page(spec, b_cond)], before)
    canon = ChunkState((spec,), [page(spec, b_canon)])
    delta = state_deficit(cond, canon)
    assert float(delta.deltas[0].norm()) > 0
    patch = StatePatch.form(delta, torch.float32)
    assert patch.full_rank == min(DK, DV) and patch.corrections(0) == [None]
    full = canon.corrected(patch.corrections(None))
    torch.testing.assert_close(
        fold([ChunkState((spec,), [page(spec, a)]), full], torch.float32, torch.device("cpu"))[0].state,
        cond.after()[0].state,
        rtol=1e-5,
        atol=1e-5,
    )
    assert patch.nbytes(2) == 2 * HV * (DK + DV) * 4
    e = patch.energy(2)[0]
    assert 0 < e < 1 and patch.energy(None)[0] == pytest.approx(1.0)


def test_bad_inputs_fail_clearly(spec):
    p = page(spec, inputs(4, 1))
    with pytest.raises(ValueError, match="no incoming state"):
        ChunkState((spec,), [p]).after()
    with pytest.raises(ValueError, match="at least one chunk"):
        fold([], torch.float32, torch.device("cpu"))
    other = DeltaRuleSpec(3, HK, HV, DK, DV, spec.conv_weight, spec.a_log, spec.dt_bias)
    with pytest.raises(ValueError, match="GDN layers differ"):
        state_deficit(ChunkState((spec,), [p], [zero(spec)]), ChunkState((other,), [p]))
