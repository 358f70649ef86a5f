"""MobileNetV5, Gemma-3n's vision encoder, as plain torch modules: the same parameter names, shapes and forward as
timm's ``mobilenetv5_300m_enc`` (``MobileNetV5Encoder``), so the Hub checkpoint's ``model.vision_tower.timm_model.*``
tensors load into :class:`MobileNetV5Encoder` unchanged, without timm (which needs torchvision).

Read, not copied, from huggingface/pytorch-image-models (``github:huggingface/pytorch-image-models`` at aa4b585):

- ``timm/models/mobilenetv5.py``: ``MobileNetV5Encoder`` (stem conv 3×3 / 2 with bias, four stages, the
  multi-scale fusion adapter over the last two stages' outputs), ``MobileNetV5MultiScaleFusionAdapter`` (nearest
  upsampling to the finest map, channel concat, a UIR with no depthwise conv as FFN, average pooling to the output
  resolution, RMSNorm), ``_gen_mobilenet_v5`` (the ``mobilenetv5_300m`` block strings, GELU-tanh, RMSNorm2d,
  layer scale 1e-5) and ``mobilenetv5_300m_enc`` (TF-style ``'same'`` padding);
- ``timm/models/_efficientnet_blocks.py``: ``EdgeResidual``, ``UniversalInvertedResidual``, ``MobileAttention``;
  ``timm/models/_efficientnet_builder.py``: how a block string becomes a block, which blocks stride, and that the
  feature taps are the stage ends (``make_divisible`` rounding of the expanded width);
- ``timm/layers/``: ``attention2d.py`` ``MultiQueryAttention2d`` (one shared K / V head, K and V downsampled by a
  depthwise conv + RMSNorm), ``norm.py`` / ``norm_act.py`` / ``fast_norm.py`` (RMSNorm over channels, eps 1e-6),
  ``conv_bn_act.py`` (``ConvNormAct``: ``.conv`` then ``.bn``), ``padding.py`` / ``conv2d_same.py`` (static
  symmetric padding at stride 1, dynamic TF ``SAME`` padding at stride 2), ``layer_scale.py`` (``gamma``).

What Gemma-3n does with the output, from transformers 5.24 ``models/gemma3n/modeling_gemma3n.py``
(``Gemma3nModel.get_image_features``): the [B, C, 16, 16] map is read as [B, 256, C] soft tokens, scaled by √C and
embedded by ``Gemma3nMultimodalEmbedder`` (``embed_vision``): see :mod:`kamera.models.gemma3n`.

The architecture is data (:data:`MOBILENETV5_300M`: stages of :class:`ER`, :class:`UIR` and :class:`MQA` specs,
written as timm's block strings read); :func:`cut_stages` makes a shallower tower of the same blocks (the shaped
checkpoint's) and :data:`MOBILENETV5_TINY` is the tiny twin's narrow one. ``tests/models/test_mobilenetv5.py``
proves the forward equal to timm's where timm is importable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

EPS = 1e-6  # timm's RmsNorm2d default


# ----- the architecture as data --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ER:
    """Edge residual (fused inverted bottleneck): a full ``kernel`` conv expanding ×``expand`` (striding), RMSNorm +
    GELU, a 1×1 projection to ``out``, RMSNorm (timm ``er_r1_k{kernel}_s{stride}_e{expand}_c{out}``)."""

    kernel: int
    stride: int
    expand: float
    out: int


@dataclass(frozen=True)
class UIR:
    """Universal inverted residual: an optional depthwise ``start`` conv, a 1×1 expansion ×``expand`` (GELU), an
    optional depthwise ``mid`` conv (GELU), a 1×1 projection to ``out``; a kernel 0 means absent. The stride is taken
    by the mid conv when there is one, else by the start conv (timm ``uir_r1_a{start}_k{mid}_s{stride}_e…_c…``)."""

    start: int
    mid: int
    stride: int
    expand: float
    out: int


@dataclass(frozen=True)
class MQA:
    """Mobile multi-query attention: ``heads`` query heads of ``key_dim`` sharing one K and one V head, K / V
    downsampled by ``kv_stride`` (a depthwise 3×3 conv + RMSNorm) when it is above 1; ``out`` channels
    (timm ``mqa_r1_k3_h{heads}[_v{kv_stride}]_s1_d{key_dim}_c{out}``)."""

    heads: int
    key_dim: int
    kv_stride: int
    out: int


Block = ER | UIR | MQA
Stages = tuple[tuple[Block, ...], ...]


def _stage2() -> tuple[Block, ...]:
    uir = UIR(5, 0, 1, 4, 640)
    pair = (MQA(12, 64, 2, 640), UIR(0, 0, 1, 2, 640))
    return (UIR(5, 5, 2, 6, 640), *[uir] * 7, UIR(0, 0, 1, 1, 640), *pair * 14)


MOBILENETV5_300M: Stages = (
    (ER(3, 2, 4, 128), ER(3, 1, 4, 128), ER(3, 1, 4, 128)),  # 384² → 192²
    (UIR(3, 5, 2, 6, 256), UIR(5, 0, 1, 4, 256), UIR(3, 0, 1, 4, 256), UIR(5, 0, 1, 4, 256), UIR(3, 0, 1, 4, 256)),
    _stage2(),  # → 48², 37 blocks
    (UIR(5, 5, 2, 6, 1280), *(MQA(16, 96, 1, 1280), UIR(0, 0, 1, 2, 1280)) * 19),  # → 24², 39 blocks
)
"""timm's ``mobilenetv5_300m`` arch_def (``_gen_mobilenet_v5``), one spec per block string."""

MOBILENETV5_TINY: Stages = (
    (ER(3, 2, 4, 8), ER(3, 1, 4, 8)),
    (UIR(3, 5, 2, 4, 16), UIR(5, 0, 1, 4, 16)),
    (UIR(5, 5, 2, 4, 24), UIR(0, 0, 1, 1, 24), MQA(2, 8, 2, 24), UIR(0, 0, 1, 2, 24)),
    (UIR(5, 5, 2, 4, 32), MQA(2, 8, 1, 32), UIR(0, 0, 1, 2, 32)),
)
"""The tiny twin's tower: every block kind of the 300M one (both MQA kinds among them), 8–32 channels."""

ARCHITECTURES = {"mobilenetv5_300m_enc": (MOBILENETV5_300M, 64), "kamera_mobilenetv5_tiny": (MOBILENETV5_TINY, 8)}
"""``vision_config.architecture`` → (stages, stem width)."""


def cut_stages(stages: Stages, depths: list[int] | tuple[int, ...]) -> Stages:
    """The same stages cut to ``depths`` blocks each: a stage keeps its first block (the one that strides) and its
    last d − 1 (the tail of its repeating pattern, so a cut stage 2 still has an MQA block and its UIR)."""
    if len(depths) != len(stages) or any(d < 1 for d in depths):
        raise ValueError(f"stage depths {list(depths)} must give each of the {len(stages)} stages at least one block")
    return tuple(s if d >= len(s) else (s[0], *s[len(s) - d + 1:]) for s, d in zip(stages, depths, strict=True))


def make_divisible(v: float, divisor: int = 8) -> int:
    """timm's channel rounding: to the nearest multiple of ``divisor`` (at least one), never 10 % below ``v``."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


# ----- layers --------------------------------------------------------------------------------------------------
class SameConv2d(nn.Conv2d):
    """A conv with TensorFlow ``SAME`` padding (timm ``pad_type='same'``): symmetric and static at stride 1 (odd
    kernels), computed from the input size at stride 2, the extra row / column going at the bottom / right."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, bias: bool = False) -> None:
        super().__init__(cin, cout, kernel, stride, padding=kernel // 2 if stride == 1 else 0, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride[0] > 1:
            pads = []
            for size in (x.shape[-1], x.shape[-2]):  # F.pad takes the last dimension (width) first
                total = max((math.ceil(size / self.stride[0]) - 1) * self.stride[0] + self.kernel_size[0] - size, 0)
                pads += [total // 2, total - total // 2]
            x = F.pad(x, pads)
        return super().forward(x)


class RMSNorm2d(nn.Module):
    """RMSNorm over the channels of an NCHW map (``weight`` [C]), then GELU-tanh when ``act``."""

    def __init__(self, channels: int, act: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + EPS) * self.weight.view(1, -1, 1, 1)
        return F.gelu(x, approximate="tanh") if self.act else x


class ConvNorm(nn.Module):
    """A conv (``.conv``) then RMSNorm (``.bn``, timm's name), with GELU-tanh when ``act``."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True,
                 bias: bool = False) -> None:
        super().__init__()
        self.conv = SameConv2d(cin, cout, kernel, stride, groups, bias)
        self.bn = RMSNorm2d(cout, act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class LayerScale2d(nn.Module):
    """Per-channel scale ``gamma`` [C] of a block's residual branch (timm initialises it to 1e-5)."""

    def __init__(self, channels: int, value: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((channels,), value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma.view(1, -1, 1, 1)


# ----- blocks --------------------------------------------------------------------------------------------------
class EdgeResidualBlock(nn.Module):
    """:class:`ER`: ``conv_exp`` → ``bn1`` (GELU) → ``conv_pwl`` → ``bn2``, plus the input when the shape is kept."""

    def __init__(self, cin: int, spec: ER) -> None:
        super().__init__()
        mid = make_divisible(cin * spec.expand)
        self.conv_exp = SameConv2d(cin, mid, spec.kernel, spec.stride)
        self.bn1 = RMSNorm2d(mid, act=True)
        self.conv_pwl = SameConv2d(mid, spec.out, 1)
        self.bn2 = RMSNorm2d(spec.out)
        self.skip = cin == spec.out and spec.stride == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv_pwl(self.bn1(self.conv_exp(x))))
        return y + x if self.skip else y


class UniversalInvertedResidualBlock(nn.Module):
    """:class:`UIR`: [``dw_start``] → ``pw_exp`` (GELU) → [``dw_mid`` (GELU)] → ``pw_proj`` → ``layer_scale``,
    plus the input when the shape is kept. ``layer_scale=None`` and ``skip=False`` give the fusion adapter's FFN."""

    def __init__(self, cin: int, spec: UIR, layer_scale: float | None = 1e-5, skip: bool = True) -> None:
        super().__init__()
        mid = make_divisible(cin * spec.expand)
        start_stride = 1 if spec.mid else spec.stride
        self.dw_start = (ConvNorm(cin, cin, spec.start, start_stride, groups=cin, act=False) if spec.start
                         else nn.Identity())
        self.pw_exp = ConvNorm(cin, mid, 1)
        self.dw_mid = ConvNorm(mid, mid, spec.mid, spec.stride, groups=mid) if spec.mid else nn.Identity()
        self.pw_proj = ConvNorm(mid, spec.out, 1, act=False)
        self.layer_scale = LayerScale2d(spec.out, layer_scale) if layer_scale is not None else nn.Identity()
        self.skip = skip and cin == spec.out and spec.stride == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer_scale(self.pw_proj(self.dw_mid(self.pw_exp(self.dw_start(x)))))
        return y + x if self.skip else y


class MultiQueryAttention2d(nn.Module):
    """Attention over the pixels of a map: ``heads`` queries of ``key_dim`` per pixel, one K and one V per (kv-strided)
    pixel shared by every head; ``query`` / ``key`` / ``value`` / ``output`` hold timm's ``proj`` (and ``down_conv``,
    ``norm``) under its names."""

    def __init__(self, dim: int, spec: MQA) -> None:
        super().__init__()
        self.heads, self.key_dim = spec.heads, spec.key_dim
        self.query = nn.ModuleDict({"proj": nn.Conv2d(dim, spec.heads * spec.key_dim, 1, bias=False)})
        self.key = self._kv(dim, spec)
        self.value = self._kv(dim, spec)
        self.output = nn.ModuleDict({"proj": nn.Conv2d(spec.heads * spec.key_dim, spec.out, 1, bias=False)})

    @staticmethod
    def _kv(dim: int, spec: MQA) -> nn.ModuleDict:
        parts: dict[str, nn.Module] = {}
        if spec.kv_stride > 1:
            parts["down_conv"] = SameConv2d(dim, dim, 3, spec.kv_stride, groups=dim)
            parts["norm"] = RMSNorm2d(dim)
        parts["proj"] = nn.Conv2d(dim, spec.key_dim, 1, bias=False)
        return nn.ModuleDict(parts)

    @staticmethod
    def _run(parts: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
        for m in parts.values():
            x = m(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        q = self.query["proj"](x).reshape(b, self.heads, self.key_dim, h * w).transpose(-1, -2)  # [b, heads, hw, d]
        k = self._run(self.key, x).flatten(2).transpose(1, 2)[:, None]  # [b, 1, hw / s², d]
        v = self._run(self.value, x).flatten(2).transpose(1, 2)[:, None]  # [b, 1, hw / s², d]
        o = F.scaled_dot_product_attention(q, k, v)  # [b, heads, hw, d]
        o = o.transpose(1, 2).reshape(b, h, w, self.heads * self.key_dim).permute(0, 3, 1, 2)  # [b, heads·d, h, w]
        return self.output["proj"](o)


class MobileAttentionBlock(nn.Module):
    """:class:`MQA`: ``norm`` → ``attn`` → ``layer_scale``, plus the input when the shape is kept."""

    def __init__(self, cin: int, spec: MQA) -> None:
        super().__init__()
        self.norm = RMSNorm2d(cin)
        self.attn = MultiQueryAttention2d(cin, spec)
        self.layer_scale = LayerScale2d(spec.out)
        self.skip = cin == spec.out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer_scale(self.attn(self.norm(x)))
        return y + x if self.skip else y


BLOCKS = {ER: EdgeResidualBlock, UIR: UniversalInvertedResidualBlock, MQA: MobileAttentionBlock}


class MultiScaleFusionAdapter(nn.Module):
    """The last two stages' maps, upsampled (nearest) to the finer one's size and concatenated on channels, through a
    UIR with no depthwise conv (``ffn``: ×2, GELU, → ``out``), pooled to ``resolution`` × ``resolution`` (average over
    whole cells, bilinear otherwise) and RMS-normed (``norm``)."""

    def __init__(self, cin: int, out: int, resolution: int) -> None:
        super().__init__()
        self.ffn = UniversalInvertedResidualBlock(cin, UIR(0, 0, 1, 2, out), layer_scale=None, skip=False)
        self.norm = RMSNorm2d(out)
        self.resolution = resolution

    def forward(self, maps: list[torch.Tensor]) -> torch.Tensor:
        size = maps[0].shape[-2:]
        x = torch.cat([m if m.shape[-2:] == size else F.interpolate(m, size=size, mode="nearest") for m in maps], 1)
        x = self.ffn(x)  # [b, out, H, W] at the finer map's size
        r = self.resolution
        if tuple(size) != (r, r):
            if size[0] % r or size[1] % r:
                x = F.interpolate(x, size=(r, r), mode="bilinear")
            else:
                x = F.avg_pool2d(x, kernel_size=(size[0] // r, size[1] // r))
        return self.norm(x)  # [b, out, r, r]


class MobileNetV5Encoder(nn.Module):
    """Stem (``conv_stem``: 3×3 / 2 conv with bias, RMSNorm, GELU), the stages (``blocks.<stage>.<i>``) and the
    fusion adapter (``msfa``) over the last two stages: pixels [B, 3, H, W] → [B, ``out``, r, r]."""

    def __init__(self, stages: Stages = MOBILENETV5_300M, stem: int = 64, out: int = 2048,
                 resolution: int = 16) -> None:
        super().__init__()
        if len(stages) < 2:
            raise ValueError(
                f"MobileNetV5 needs at least two stages (the fusion adapter reads the last two), got {len(stages)}"
            )
        self.conv_stem = ConvNorm(3, stem, 3, 2, bias=True)
        chs, seq = stem, []
        for stage in stages:
            blocks = []
            for spec in stage:
                blocks.append(BLOCKS[type(spec)](chs, spec))
                chs = spec.out
            seq.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*seq)
        self.msfa = MultiScaleFusionAdapter(stages[-2][-1].out + stages[-1][-1].out, out, resolution)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.conv_stem(pixels)
        taps = []
        for i, stage in enumerate(self.blocks):
            x = stage(x)
            if i >= len(self.blocks) - 2:
                taps.append(x)
        return self.msfa(taps)
