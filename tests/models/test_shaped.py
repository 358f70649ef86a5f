"""Every native paper model on its shaped checkpoint (real dimensions, tokenizer and file layout; 2 decoder and
2 vision layers; random weights), loaded through ``load_model(name, models_root=…)`` as a real one is.

Per model, in float32: the published config survives loading; the cache is read as the paper's channels
with the bytes the paper counts; relocation is exact (1e-5 relative); the full-rank patch reproduces
re-prefill (η ≥ 0.999) and rank 0 is blind reuse; the 4D-mask oracle equals blind reuse with the canonical
at native positions; for the Qwen families the same on a video chunk. Float32 runs keep the vocabulary
matrices at their stored bf16 (exact: see ``kamera.models.loading``), so each model fits in a few GB.
bf16 relocation and the chat template: ``test_shaped_bf16.py`` (run after these, one model in memory at a
time). Kimi-VL and Phi-3.5-V (``REMOTE``) have theirs in ``tests/models_remote``.
"""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path

import pytest
import torch
from shaped_fixtures import shaped_marks
from shaped_support import (
    BF16_ONLY,
    OWN,
    REMOTE,
    content,
    item_spans,
    native_shaped_models,
    need_real_tokenizer,
    prefill_alone,
    rotary,
    video_item,
)
from test_adapters import model_inputs

from kamera.core import ChunkKV, Deficit, Patch, relocate, rotate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.models import load_model
from kamera.models.shaped import shaped_models, shaped_writer
from kamera.reuse.context import ReuseContext

FP32 = [n for n in native_shaped_models() if n not in BF16_ONLY]
ROOT = Path(__file__).resolve().parents[2]


def test_every_writer_is_covered_here_or_where_remote_says():
    """A model with a writer runs these tests unless ``REMOTE`` sends it to tests/models_remote, whose identity
    and checkpoint tests then name it, or ``OWN`` to its own test file."""
    assert set(FP32) | set(BF16_ONLY) | set(REMOTE) | set(OWN) == set(shaped_models())
    assert all((ROOT / v.split(" ")[0]).is_file() for v in OWN.values())
    for f in ("test_identities.py", "test_checkpoints.py"):
        text = (ROOT / "tests" / "models_remote" / f).read_text()
        assert all(f'"{n}"' in text and f in REMOTE[n] for n in REMOTE), f


def rel_err(a: ChunkKV, b: ChunkKV, channel: int) -> float:
    """Worst layer of ‖a − b‖ / ‖b‖ on one channel."""
    return max(float((x[channel].double() - y[channel].double()).norm() / y[channel].double().norm())
               for x, y in zip(a.layers, b.layers, strict=True))


@pytest.fixture(scope="module", params=[pytest.param(n, marks=shaped_marks(n, gate=True)) for n in FP32])
def fp32(request, shaped_root):
    """The shaped model loaded in float32 (on an idle machine with the CPU threads it has while it lives)."""
    name = request.param
    need_real_tokenizer(name)
    threads = torch.get_num_threads()
    if os.getloadavg()[0] < (os.cpu_count() or 1) - 0.5:  # spare cores; threads only slow a loaded machine
        torch.set_num_threads(os.cpu_count() or 1)
    adapter = load_model(name, models_root=shaped_root(name), dtype="float32")
    yield adapter
    del adapter
    gc.collect()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def item(fp32):
    return ReuseContext(fp32, item_spans(fp32.name))


def native_of(ctx: ReuseContext) -> ReuseContext:
    """The same item with the canonical at B's native positions, sharing the re-prefill and the oracle forward
    (neither depends on where the canonical sits)."""
    native = ReuseContext(ctx.adapter, ctx.enc, canonical_context="native")
    native.__dict__["full"] = ctx.full
    native.__dict__["oracle"] = ctx.oracle
    return native


# ----- what was loaded --------------------------------------------------------------------------------
def _leaves(d: dict, path: tuple = ()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, (*path, k))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield (*path, k), v


def _lookup(node, path: tuple):
    for key in path:
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
        if node is None:
            return None
    return node


@pytest.mark.shaped
def test_published_config_survives_loading(fp32):
    """Every number of the published config (but the shortened layer counts) is what the loaded model uses."""
    spec = shaped_writer(fp32.name).spec
    shaped = spec.shaped_config(2, 2)
    changed = {tuple(p.split(".")) for p in (*spec.text_layers, *spec.vision_layers)}
    config = fp32.model.config
    if spec.model.startswith(("qwen3_omni", "qwen2_5_omni")):  # the adapter wraps the thinker: thinker_config
        shaped, changed = shaped["thinker_config"], {p[1:] for p in changed}
    text = config.get_text_config(decoder=True)
    checked = 0
    for path, value in _leaves(shaped):
        if path in changed or "rope_scaling" in path:
            continue
        got = _lookup(config, path)
        if got is None and path[0] == "text_config" and _lookup(config, path[:1]) is None:  # the decoder alone
            path = path[1:]  # (Gemma-3n: its text config is the loaded model's config)
        if got is None and len(path) == 1:  # a flat published config: text fields live in text_config now
            got = _lookup(text, path)
        if got is None and path[-1] == "rope_theta":
            rope = _lookup(text if len(path) == 1 else config, (*path[:-1], "rope_parameters"))
            got = rope.get("full_attention", rope)["rope_theta"]  # per layer type (Gemma-3n): the global layers' θ
        if got is not None:
            assert got == pytest.approx(value), (path, got, value)
            checked += 1
    assert checked >= 12
    assert fp32.n_layers == 2


@pytest.mark.shaped
def test_channels_and_patch_bytes_at_n_b_500(fp32):
    """K/V (GQA, MHA) as [kv_heads, head_dim]; a rank-m patch costs m·(n_B + width) per layer-channel against a
    page of n_B·width: at n_B = 500 and width 512 (Qwen2.5-VL, InternVL3, Qwen3-Omni) rank 16 / 64 are the
    paper's ≈ 6 % / 25 %."""
    t = fp32.text_config
    head_dim = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    width = (t.num_key_value_heads or t.num_attention_heads) * head_dim
    assert [s.name for s in fp32.specs] == ["k", "v"]
    assert all(s.width == width for s in fp32.specs) and fp32.specs[0].rotary.rotary_dim == head_dim
    n_b = 500
    g = torch.Generator().manual_seed(0)
    layer = tuple(torch.randn(n_b, s.heads, s.dim, generator=g) for s in fp32.specs)
    zeros = ChunkKV(fp32.specs, [tuple(torch.zeros_like(x) for x in layer)], torch.arange(n_b)[None])
    delta = Deficit(fp32.specs, [layer], torch.arange(n_b)[None])  # one layer: fractions are per layer
    patch = Patch.form(delta)
    for m in (16, 64):
        frac = patch.truncate(m).bytes_fraction(zeros)
        assert frac == pytest.approx(m * (n_b + width) / (n_b * width))
        if width == 512:
            assert (0.055 <= frac <= 0.065) if m == 16 else (0.23 <= frac <= 0.26)


@pytest.mark.shaped
def test_spanwise_encoding_is_the_models_own_forward(fp32, item):
    """The item encoded span by span (vision features merged per image, the adapter's own M-RoPE positions,
    deepstack features where the model has them) gives the logits of the checkpoint's own multimodal forward on
    the whole item: what catches a loader or adapter that breaks a family's positions or visual injection, which
    the identities (adapter against adapter) cannot see. The M-RoPE families; the others' own forwards are
    checked on their tiny twins (tests/test_adapters.py) and, for remote code, against the public reference."""
    if fp32.position_rows != 3:
        pytest.skip(f"{fp32.name}: 1-D positions, checked on its tiny twin")
    _, ids, kwargs = model_inputs(fp32, item_spans(fp32.name))
    embedding = fp32.model.model.get_input_embeddings()
    stored = embedding.weight  # kept bf16 in memory (kamera.models.loading): the model's own forward would merge
    embedding.weight = torch.nn.Parameter(stored.float(), requires_grad=False)  # vision features in bf16
    try:
        with torch.no_grad():
            ref = fp32.logits(fp32.model.model(input_ids=ids, **kwargs).last_hidden_state[0, -1])
    finally:
        embedding.weight = stored
    torch.testing.assert_close(item.reprefill_logits, ref, rtol=0, atol=1e-4)


# ----- relocation -------------------------------------------------------------------------------------
def test_relocation_is_exact_in_fp32(fp32, item):
    """B prefilled alone and moved by R(δ) = B prefilled alone at +δ (keys to 1e-5 relative at every layer,
    values untouched); and on text, layer-0 keys moved by R(δ = 1000) match a float64-angle rotation to 1e-6
    (beyond ~1k positions the model's own float32 p·θ carries ~1e-5, see tests/test_operator.py)."""
    b = item.enc.spans[item.b]
    base = prefill_alone(fp32, b, 0)
    k, v = rotary(fp32), content(fp32)
    moved = relocate(base, 97)
    assert rel_err(moved, prefill_alone(fp32, b, 97), k) <= 1e-5
    assert all(m[v] is x[v] for m, x in zip(moved.layers, base.layers, strict=True))
    text = prefill_alone(fp32, Span("B", ("the key waits under the red cup",)), 0)
    spec = fp32.specs[k].rotary
    keys0 = text.layers[0][k].double()
    unroped = torch.stack([rotate(keys0[t], -t, spec) for t in range(text.n_tokens)])
    exact = torch.stack([rotate(unroped[t], 1000 + t, spec) for t in range(text.n_tokens)])
    assert float((relocate(text, 1000).layers[0][k].double() - exact).norm() / exact.norm()) <= 1e-6


# ----- the patch and the oracle -----------------------------------------------------------------------
@pytest.mark.shaped
def test_full_rank_patch_is_re_prefill_and_rank_zero_is_blind(item):
    ref = item.reprefill_logits
    kl_blind = kl(ref, item.blind.logits)
    assert kl_blind > 1e-6  # measurable (SmolVLM2's deficit is small, as the paper finds)
    full = item.patch.apply(item.relocated)
    assert all(rel_err(full, item.conditioned, c) <= 1e-5 for c in range(2))
    assert eta(kl(ref, item.query(full).logits), kl_blind) >= 0.999
    zero = item.query(item.patch.truncate(0).apply(item.relocated))
    assert torch.equal(zero.hidden, item.blind.hidden)


@pytest.mark.shaped
def test_oracle_equals_blind_with_the_canonical_at_native_positions(fp32, item):
    native = native_of(item)
    assert native.delta == 0
    assert all(rel_err(native.oracle_b, native.canonical, c) <= 1e-5 for c in range(2))
    torch.testing.assert_close(native.blind.hidden, native.oracle.hidden, rtol=1e-4, atol=1e-4)
    assert math.isfinite(item.ctrl_kl()) and item.ctrl_kl() > 0 and item.loss_kl() > 0


# ----- video (the Qwen families' own video input) ------------------------------------------------------
@pytest.fixture(scope="module")
def video(fp32):
    if not fp32.takes_video:
        pytest.skip(f"{fp32.name} reads a clip's frames as images")
    return ReuseContext(fp32, video_item())


@pytest.mark.shaped
@pytest.mark.full
def test_video_chunk_identities(fp32, video):
    """A clip as B: relocation exact, full rank = re-prefill, rank 0 = blind, oracle = blind at native positions."""
    b = video.enc.spans[video.b]
    assert b.n_tokens > 0 and bool((b.input_ids == fp32.model.config.video_token_id).any())
    base = prefill_alone(fp32, b, 0)
    assert rel_err(relocate(base, 57), prefill_alone(fp32, b, 57), rotary(fp32)) <= 1e-5
    ref, kl_blind = video.reprefill_logits, kl(video.reprefill_logits, video.blind.logits)
    assert eta(kl(ref, video.query(video.patch.apply(video.relocated)).logits), kl_blind) >= 0.999
    assert torch.equal(video.query(video.patch.truncate(0).apply(video.relocated)).hidden, video.blind.hidden)
    native = native_of(video)
    torch.testing.assert_close(native.blind.hidden, native.oracle.hidden, rtol=1e-4, atol=1e-4)
