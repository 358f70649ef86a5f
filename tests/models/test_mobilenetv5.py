"""kamera's MobileNetV5 (kamera.models.mobilenetv5) against timm's, and its layout against the shaped checkpoint's.

Without timm (the harness venv): the full-size encoder's tensor names and shapes are exactly those the shaped
writer writes under ``model.vision_tower.timm_model.`` for an uncut tower, and stage cutting keeps every block kind.
With timm importable (a side venv with torchvision: never the harness's): timm's own ``mobilenetv5_300m_enc``, and
a narrow encoder built by timm from the same block specs, get random weights that are copied into ours with
``strict=True``, and both forwards agree to float32 rounding, through the Gemma-3n wrapper too.
"""

from __future__ import annotations

import pytest
import torch

from kamera.models.mobilenetv5 import (
    ER,
    MOBILENETV5_300M,
    MOBILENETV5_TINY,
    UIR,
    MobileNetV5Encoder,
    cut_stages,
)


def block_string(spec) -> str:
    """A spec as timm's arch_def block string (``_efficientnet_builder._decode_block_str`` reads it)."""
    if isinstance(spec, ER):
        return f"er_r1_k{spec.kernel}_s{spec.stride}_e{spec.expand:g}_c{spec.out}"
    if isinstance(spec, UIR):
        return f"uir_r1_a{spec.start}_k{spec.mid}_s{spec.stride}_e{spec.expand:g}_c{spec.out}"
    kv = f"_v{spec.kv_stride}" if spec.kv_stride > 1 else ""
    return f"mqa_r1_k3_h{spec.heads}{kv}_s1_d{spec.key_dim}_c{spec.out}"


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Weights far from timm's init (layer scale 1e-5 would hide every block's branch): norms and layer scales
    around 1, convs at ±1 / √fan-in."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.ndim == 1 and not name.endswith(".bias"):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p[0].numel() ** 0.5)


def shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# ----- without timm ---------------------------------------------------------------------------------------------
def test_full_size_layout_is_the_shaped_writers():
    """The uncut 300M tower's state dict (no buffers) is, name for name and shape for shape, what the shaped writer
    lays out for ``model.vision_tower.timm_model.``; it has timm's stage lengths 3 / 5 / 37 / 39 and its parameter
    count (294,126,912: timm 1.0.31's ``mobilenetv5_300m_enc``, which the timm test below re-counts)."""
    from kamera.models.shaped import shaped_spec

    spec = shaped_spec("gemma3n_e4b")
    cfg = spec.shaped_config(2, 40)
    assert cfg["vision_config"]["model_args"] is None  # deep enough: the published tower, uncut
    prefix = "model.vision_tower.timm_model."
    written = {k.removeprefix(prefix): s for k, (s, _) in spec.tensors(cfg, 40).items() if k.startswith(prefix)}
    with torch.device("meta"):
        ours = MobileNetV5Encoder()
    assert [len(s) for s in MOBILENETV5_300M] == [3, 5, 37, 39]
    assert shapes(ours) == written
    assert dict(ours.named_buffers()) == {}
    assert sum(p.numel() for p in ours.parameters()) == 294_126_912
    assert written["msfa.ffn.pw_exp.conv.weight"] == (3840, 640 + 1280, 1, 1)  # the fused last two stages
    assert written["blocks.3.1.attn.key.proj.weight"] == (96, 1280, 1, 1)  # one shared K head of 96


def test_cut_stages_keeps_every_block_kind():
    cut = cut_stages(MOBILENETV5_300M, [3, 3, 3, 3])
    assert [len(s) for s in cut] == [3, 3, 3, 3]
    assert [type(b).__name__ for b in cut[2]] == ["UIR", "MQA", "UIR"] and cut[2][0].stride == 2
    assert cut_stages(MOBILENETV5_300M, [99] * 4) == MOBILENETV5_300M
    with pytest.raises(ValueError, match="at least one block"):
        cut_stages(MOBILENETV5_300M, [3, 3, 0, 3])


@pytest.mark.parametrize("size", [(128, 128), (131, 97)])
def test_output_grid_and_same_padding(size):
    """Any input size gives the configured r × r map (whole-cell pooling or bilinear); a stride-2 conv with TF SAME
    padding gives ⌈n / 2⌉ rows."""
    enc = MobileNetV5Encoder(MOBILENETV5_TINY, 8, 64, 4)
    assert enc(torch.randn(1, 3, *size)).shape == (1, 64, 4, 4)
    assert enc.conv_stem(torch.randn(1, 3, *size)).shape[-2:] == tuple((n + 1) // 2 for n in size)


# ----- against timm ----------------------------------------------------------------------------------------------
def test_equal_to_timm_300m_through_the_gemma3n_wrapper():
    """transformers' TimmWrapperModel on timm's mobilenetv5_300m_enc (Gemma3nVisionConfig's defaults), random
    weights, copied strictly into kamera's tower: last_hidden_state [1, 2048, 16, 16] agrees at 768 px."""
    pytest.importorskip("timm")
    import transformers as tf

    from kamera.models.gemma3n import MobileNetV5Tower

    config = tf.Gemma3nVisionConfig()
    theirs = tf.TimmWrapperModel(config).eval()
    randomize(theirs)
    ours = MobileNetV5Tower(config).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert sum(p.numel() for p in theirs.parameters()) == 294_126_912
    x = torch.rand(1, 3, 768, 768, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = theirs(pixel_values=x, do_pooling=False).last_hidden_state
        got = ours(pixel_values=x).last_hidden_state
    assert got.shape == want.shape == (1, 2048, 16, 16)
    err = float((got - want).abs().max() / want.abs().max())
    assert err <= 1e-5, err


@pytest.mark.parametrize("size", [(128, 128), (131, 97), (64, 200)])
def test_equal_to_timm_narrow_variant(size):
    """timm's MobileNetV5Encoder built from the tiny twin's block specs (as block strings) = ours on the same
    weights, for square, odd and wide inputs (dynamic SAME padding, bilinear or average pooling)."""
    pytest.importorskip("timm")
    from functools import partial

    from timm.layers import RmsNorm2d
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.mobilenetv5 import MobileNetV5Encoder as TimmEncoder

    arch = [[block_string(b) for b in stage] for stage in MOBILENETV5_TINY]
    theirs = TimmEncoder(block_args=decode_arch_def(arch), stem_size=8, pad_type="same", msfa_output_resolution=4,
                         norm_layer=RmsNorm2d, act_layer=partial(torch.nn.GELU, approximate="tanh"),
                         layer_scale_init_value=1e-5).eval()
    randomize(theirs, seed=2)
    ours = MobileNetV5Encoder(MOBILENETV5_TINY, 8, 2048, 4).eval()  # timm's encoder always outputs 2048 channels
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, got = theirs(x), ours(x)
    assert got.shape == want.shape == (2, 2048, 4, 4)
    err = float((got - want).abs().max() / want.abs().max())
    assert err <= 1e-5, err
