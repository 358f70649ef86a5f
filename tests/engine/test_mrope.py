"""M-RoPE through the connector: the tiny Qwen2.5-VL (sectioned bands 8/12/12) and Qwen3-VL (interleaved bands,
deepstack) with an image in A and an image at the head of B.

Every splice claims [prefix · A · B]: both images' tokens are cached, so vLLM's vision encoder never runs for the
request (the connector records how many encoder inputs vLLM scheduled), and vLLM places the query after them with
its own ``get_mrope_input_positions``. B moves by one δ on all three rows: the position after A's last row, not
its token count (A's image advances the rows by its grid side, not by its tokens), so a relocation that used the
token offset would be wrong; the tests check the page positions against that.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kamera.core import Patch, deficit, relocate
from kamera.engine.family import EngineError
from kamera.metrics import kl

pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
pytestmark = pytest.mark.engine
FP32_ROUNDING = 32 * torch.finfo(torch.float32).eps


def image(seed: int, size: tuple[int, int]):
    from PIL import Image

    return Image.fromarray((np.random.RandomState(seed).rand(*size, 3) * 255).astype("uint8"))


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def vl(request, tmp_path_factory):
    """(session, item): a live engine on the tiny VL twin and one item, its prompt expanded by the processor."""
    from kamera.engine.checkpoint import CHECKPOINTS
    from kamera.engine.vllm import EngineSession
    from kamera.models import tiny

    ckpt = CHECKPOINTS[request.param](tmp_path_factory.mktemp(f"engine-{request.param}"))
    s = EngineSession(ckpt, tmp_path_factory.mktemp(f"store-{request.param}"), max_model_len=512)
    g = torch.Generator().manual_seed(3)
    text = lambda n: torch.randint(16, 400, (n,), generator=g).tolist()  # noqa: E731
    img = [tiny.VSTART, tiny.IMAGE, tiny.VEND]
    a_img, b_img, other = image(1, (100, 90)), image(2, (60, 120)), image(5, (60, 120))
    parts = {
        "prefix": (text(5), []),
        "A": (text(9) + img + text(11), [a_img]),
        "B": (img + text(23), [b_img]),
        "query": (text(6), []),
    }
    item = {role: s.expand(ids, ims) for role, (ids, ims) in parts.items()}
    item["a_img"], item["b_img"], item["other"] = a_img, b_img, other
    yield s, item
    s.close()


def spans(item):
    p, a, b = (len(item[r]) for r in ("prefix", "A", "B"))
    return p, p + a, p + a + b


def full_prompt(item):
    return item["prefix"] + item["A"] + item["B"] + item["query"]


def prepared(vl):
    """vLLM's full prefill captured as 'full', [prefix · B] as 'canon', B's patch stored; δ from the pages'
    positions."""
    from kamera.engine.store import save_patch

    s, item = vl
    p, pa, pb = spans(item)
    ref = s.run(full_prompt(item), {"capture": "full"}, images=[item["a_img"], item["b_img"]])
    s.run(item["prefix"] + item["B"], {"capture": "canon"}, images=[item["b_img"]])
    full, canon = s.page("full")[0], s.page("canon")[0]
    delta = int(full.positions[0, pa] - canon.positions[0, p])
    patch = Patch.form(deficit(full.slice(pa, pb), relocate(canon.slice(p, p + pb - pa), delta)), dtype=full.dtype)
    save_patch(s.store, "patch", patch, s.model)
    return s, item, ref, full, delta


def splice(s, item, capture, images=None, **b):
    p, pa, pb = spans(item)
    seg = {"key": "canon", "span": [p, p + pb - pa], "start": pa, **b}
    return s.run(
        full_prompt(item),
        {"capture": capture, "tag": capture, "segments": [{"key": "full", "span": [0, pa]}, seg]},
        images=images or [item["a_img"], item["b_img"]],
    )


def b_kv(s, item, key):
    _, pa, pb = spans(item)
    return s.page(key)[0].slice(pa, pb)


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def test_pages_carry_vllms_three_row_positions_and_b_moves_rigidly(vl):
    s, item, _, full, delta = prepared(vl)
    p, pa, pb = spans(item)
    canon = s.page("canon")[0]
    assert full.positions.shape == (3, len(full_prompt(item)))
    moved = full.positions[:, pa:pb] - canon.positions[:, p : pb - pa + p]
    assert torch.equal(moved, torch.full_like(moved, delta))  # one δ on every row and token
    assert delta < pa - p  # A's image advances the rows by its grid side, not its token count
    assert not torch.equal(full.positions[0], full.positions[1])  # the image rows differ: real 3-D positions


def test_round_trip_is_exact_and_the_encoder_never_runs_for_cached_images(vl):
    s, item, ref, full, _ = prepared(vl)
    _, _, pb = spans(item)
    out = s.run(
        full_prompt(item),
        {"capture": "again", "tag": "again", "segments": [{"key": "full", "span": [0, pb]}]},
        images=[item["a_img"], item["b_img"]],
    )
    assert out.num_cached_tokens == pb
    for a, b in zip(full.slice(0, pb).layers, s.page("again")[0].slice(0, pb).layers, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(out.logprobs, ref.logprobs)
    assert s.timings()[-1]["encoder_inputs"] == 0  # both images inside the claim: no encoder input scheduled


def test_relocation_is_vllms_prefill_at_the_new_position_and_unrotated_is_not(vl):
    s, item, _, _, _ = prepared(vl)
    splice(s, item, "blind")
    blind, ref = b_kv(s, item, "blind"), b_kv(s, item, "full")
    for got, want in zip(blind.layers[0], ref.layers[0], strict=True):
        assert rel(got, want) < FP32_ROUNDING
    splice(s, item, "unrotated", rotate=False)
    assert rel(b_kv(s, item, "unrotated").layers[0][0], ref.layers[0][0]) > 1e-2


def test_full_rank_is_the_re_prefill_and_rank_zero_is_blind(vl):
    s, item, ref, _, _ = prepared(vl)
    out = splice(s, item, "full_rank", patch="patch", rank=None)
    for (k, v), (k_ref, v_ref) in zip(b_kv(s, item, "full_rank").layers, b_kv(s, item, "full").layers, strict=True):
        assert rel(k, k_ref) < 1e-5 and rel(v, v_ref) < 1e-5
    assert kl(ref.logprobs.float(), out.logprobs.float()) < 1e-9
    blind = splice(s, item, "blind")
    zero = splice(s, item, "rank0", patch="patch", rank=0)
    assert torch.equal(zero.logprobs, blind.logprobs)
    assert kl(ref.logprobs.float(), blind.logprobs.float()) > 1e3 * max(
        kl(ref.logprobs.float(), out.logprobs.float()), 1e-15
    )


def test_another_image_under_the_same_tokens_falls_back_to_exact_prefill(vl):
    """B's page holds image b; a prompt with another image of the same size has the same token ids, so only the
    content digest tells them apart: the scheduler refuses the claim and vLLM prefills (recompute policy)."""
    s, item, _, _, _ = prepared(vl)
    with pytest.raises(EngineError, match=r"fell back to vLLM's prefill: page 'canon' .* hold media"):
        splice(s, item, "wrong", images=[item["a_img"], item["other"]])
    ok = s.run(
        full_prompt(item),
        {"segments": [{"key": "full", "span": [0, spans(item)[1]]}], "tag": "ok"},
        images=[item["a_img"], item["other"]],
    )
    assert ok.num_cached_tokens == spans(item)[1]  # A's page (image a) still serves: the engine goes on
