"""The kamera connector inside vLLM: its KV round trip, relocation, the rank identities and bad requests.

Each test runs on the tiny Qwen2 (GQA page: K, V) and the tiny DeepSeek-V2 (MLA page: latent c_KV, k_pe).
Every splice claims [prefix · A · B] (95 tokens, not a multiple of the 32- or 16-token block) and vLLM
computes only the query; ``EngineSession.run`` fails unless vLLM reports exactly the claimed tokens as cached.
"""

from __future__ import annotations

import pytest
import torch

from kamera.core import Patch, deficit, relocate
from kamera.engine.family import EngineError, attention
from kamera.engine.store import StoreError, save_page, save_patch
from kamera.metrics import kl

pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
pytestmark = pytest.mark.engine
BF16_EPS = torch.finfo(torch.bfloat16).eps
FP32_ROUNDING = 32 * torch.finfo(torch.float32).eps  # vLLM's cos / sin tables hold position × θ in float32


def spans(item):
    p, a, b = (len(item[r]) for r in ("prefix", "A", "B"))
    return p, p + a, p + a + b  # end of prefix, start of B, end of B


def prompt(item):
    return item["prefix"] + item["A"] + item["B"] + item["query"]


def prepared(engine, item, dtype):
    """The session, vLLM's full prefill (captured as 'full'), the canonical [prefix · B] page and B's stored patch."""
    s = engine(dtype)
    p, pa, pb = spans(item)
    ref = s.run(prompt(item), {"capture": "full"})
    s.run(item["prefix"] + item["B"], {"capture": "canon"})
    full, _ = s.page("full")
    canon, _ = s.page("canon")
    patch = Patch.form(deficit(full.slice(pa, pb), relocate(canon.slice(p, p + pb - pa), pa - p)), dtype=full.dtype)
    save_patch(s.store, "patch", patch, s.model)
    return s, ref, full


def splice(s, item, capture, **b):
    p, pa, pb = spans(item)
    seg = {"key": "canon", "span": [p, p + pb - pa], "start": pa, **b}
    return s.run(prompt(item), {"capture": capture, "segments": [{"key": "full", "span": [0, pa]}, seg]})


def b_kv(s, item, key):
    _, pa, pb = spans(item)
    return s.page(key)[0].slice(pa, pb)


def rotary(page) -> int:
    """The index of the page's rotary channel (GQA K, MLA k_pe)."""
    return next(i for i, spec in enumerate(page.specs) if spec.rotary is not None)


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def test_round_trip_of_the_engines_own_kv_is_exact(engine, item):
    """The engine's own KV captured and re-injected is bit-identical in the cache, and so are the log-probs of two
    splices of it. Against vLLM's prefill the log-probs are equal on the GQA backend (it reads the whole context
    from the paged cache either way) and equal to float rounding on MLA, whose prefill attends to the fresh
    latent in one pass while a query after cached context merges two partial attentions by their log-sum-exp
    (``_compute_prefill_context`` in vLLM's ``mla_attention.py``)."""
    s, ref, full = prepared(engine, item, "float32")
    _, _, pb = spans(item)
    out = s.run(prompt(item), {"capture": "again", "segments": [{"key": "full", "span": [0, pb]}]})
    assert out.num_cached_tokens == pb and pb % 32 and pb % 16
    again, _ = s.page("again")
    for a, b in zip(full.slice(0, pb).layers, again.slice(0, pb).layers, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    twice = s.run(prompt(item), {"segments": [{"key": "again", "span": [0, pb]}]})
    assert torch.equal(twice.logprobs, out.logprobs)
    if attention(s.config) == "GQA":
        assert torch.equal(out.logprobs, ref.logprobs)
    else:
        assert float((out.logprobs - ref.logprobs).abs().max()) < FP32_ROUNDING


def test_relocation_through_the_connector_is_vllms_prefill_at_the_new_position(engine, item):
    """Layer 0 isolates relocation: its rotary channel (K, k_pe) depends on the token and its position only,
    its content channel (V, c_KV) on the token only."""
    s, _, _ = prepared(engine, item, "float32")
    splice(s, item, "blind")
    blind, ref = b_kv(s, item, "blind"), b_kv(s, item, "full")
    for got, want in zip(blind.layers[0], ref.layers[0], strict=True):
        assert rel(got, want) < FP32_ROUNDING
    unrotated = splice(s, item, "unrotated", rotate=False)
    r = rotary(ref)
    assert rel(b_kv(s, item, "unrotated").layers[0][r], ref.layers[0][r]) > 1e-2  # without R(δ) the keys are wrong
    assert unrotated.num_cached_tokens == spans(item)[2]


def test_full_rank_patch_is_the_re_prefill(engine, item):
    s, ref, _ = prepared(engine, item, "float32")
    out = splice(s, item, "full_rank", patch="patch", rank=None)
    for (k, v), (k_ref, v_ref) in zip(b_kv(s, item, "full_rank").layers, b_kv(s, item, "full").layers, strict=True):
        assert rel(k, k_ref) < 1e-5 and rel(v, v_ref) < 1e-5
    assert kl(ref.logprobs.float(), out.logprobs.float()) < 1e-9
    blind = splice(s, item, "blind")
    assert kl(ref.logprobs.float(), blind.logprobs.float()) > 1e3 * max(
        kl(ref.logprobs.float(), out.logprobs.float()), 1e-15
    )


def test_rank_zero_is_blind_reuse(engine, item):
    s, _, _ = prepared(engine, item, "float32")
    zero = splice(s, item, "rank0", patch="patch", rank=0)
    blind = splice(s, item, "blind")
    assert torch.equal(zero.logprobs, blind.logprobs)
    for (k0, v0), (k1, v1) in zip(b_kv(s, item, "rank0").layers, b_kv(s, item, "blind").layers, strict=True):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)


def test_bad_requests_are_refused_before_anything_runs(engine, item, tmp_path):
    s, _, full = prepared(engine, item, "float32")
    _, pa, pb = spans(item)
    with pytest.raises(StoreError, match="not in the store"):
        s.run(prompt(item), {"segments": [{"key": "absent", "span": [0, pa]}]})
    save_page(s.store, "foreign", full, torch.tensor(prompt(item)), "another-model::float32")
    with pytest.raises(StoreError, match="belongs to model another-model"):
        s.run(prompt(item), {"segments": [{"key": "foreign", "span": [0, pa]}]})
    with pytest.raises(EngineError, match="past the engine's max_model_len"):
        s.run(prompt(item) * 6, {"segments": [{"key": "full", "span": [0, pa]}]})
    with pytest.raises(EngineError, match="differ from the prompt"):
        s.run(item["query"] + prompt(item), {"segments": [{"key": "full", "span": [0, pa]}]})
    with pytest.raises(EngineError, match="at least the last one must be computed"):
        s.run(prompt(item)[:pb], {"segments": [{"key": "full", "span": [0, pb]}]})
    with pytest.raises(EngineError, match="must tile the prompt"):
        s.run(
            prompt(item),
            {"segments": [{"key": "full", "span": [0, pa]}, {"key": "canon", "span": [0, 5], "start": pa + 1}]},
        )
    ok = s.run(prompt(item), {"segments": [{"key": "full", "span": [0, pa]}]})  # the engine still serves
    assert ok.num_cached_tokens == pa


def test_vllms_prefill_is_transformers_on_the_same_checkpoint(engine, item, checkpoint):
    """The engine and kamera's own splice (transformers) read one model: next-token log-probs agree in float32."""
    from transformers import AutoModelForCausalLM

    out = engine("float32").run(prompt(item))
    lm = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        logits = lm(torch.tensor([prompt(item)])).logits[0, -1]
    assert float((out.logprobs - torch.log_softmax(logits.double(), -1)).abs().max()) < 1e-4


def test_bf16_relocation_and_full_rank_are_within_bf16_rounding(engine, item):
    s, ref, _ = prepared(engine, item, "bfloat16")
    splice(s, item, "blind")
    for got, want in zip(b_kv(s, item, "blind").layers[0], b_kv(s, item, "full").layers[0], strict=True):
        assert rel(got, want) <= 2 * BF16_EPS
    out = splice(s, item, "full_rank", patch="patch", rank=None)
    for (k, v), (k_ref, v_ref) in zip(b_kv(s, item, "full_rank").layers, b_kv(s, item, "full").layers, strict=True):
        assert rel(k, k_ref) <= 2 * BF16_EPS and rel(v, v_ref) <= 2 * BF16_EPS
    blind = splice(s, item, "blind")
    assert kl(ref.logprobs.float(), out.logprobs.float()) < kl(ref.logprobs.float(), blind.logprobs.float()) / 10
