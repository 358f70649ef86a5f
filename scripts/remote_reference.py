"""Independent forwards of Kimi-VL, Phi-3.5-V and InternVL-Chat-V1.1, written from
the public implementations' semantics.

They read the checkpoint's own tensors by their own names (lazily, upcast to float32 layer by layer)
and use plain torch ops only, no transformers module and nothing of ``kamera.models``, so a match
with the native mapping checks the mapping, not the mapping against itself. Used by
``scripts/gpu_check.py --remote-equivalence`` where the remote code cannot run, and by the tests.

Semantics followed (the same public files the native mapping cites):
- Kimi-VL: MoonViT as vLLM ``moonvit.py`` (complex 2-D RoPE, (x, y) pairs, bicubic position-grid
  resampling, 2×2 ``patch_merger``), projector as vLLM ``kimi_vl.py``; the DeepSeek-V3 decoder as the
  remote ``modeling_deepseek`` code: MLA with per-head K/V expanded from c_KV, the interleaved rope
  weights de-interleaved before ``rotate_half``, the ``noaux_tc`` sigmoid router (n_group = 1).
- Phi-3.5-V: CLIP ViT-L/14-336 read at ``hidden_states[-2]``, the ``sub_glb`` HD layout and projector as
  the Hub ``modeling_phi3_v.py``, the Phi-3 decoder with ``Phi3SuScaledRotaryEmbedding`` (short factors).
- InternVL-Chat-V1.1: InternViT-6B (fused qkv, q/k RMSNorm over all heads, layer scales) read at
  ``hidden_states[select_layer]``, ``pixel_shuffle`` ('v1': transposed) and ``mlp1`` as OpenGVLab/InternVL
  ``internvl_chat/internvl/model/internvl_chat/modeling_intern_vit.py`` /
  ``modeling_internvl_chat.py``; a Llama decoder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open


class Weights:
    """Checkpoint tensors by name, read on demand as float32; each read opens and closes its shard, so
    nothing stays mapped (the native model under test is in memory beside this)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        self.where = json.loads(index.read_text())["weight_map"] if index.is_file() else None

    def _slice(self, name: str, fn):
        with safe_open(str(self.path / (self.where[name] if self.where else "model.safetensors")), "pt") as f:
            return fn(f.get_slice(name))

    def __call__(self, name: str) -> torch.Tensor:
        return self._slice(name, lambda sl: sl[:]).float()

    def rows(self, name: str, ids: list[int]) -> torch.Tensor:
        """Rows ``ids`` of a 2-D tensor without reading the rest (embedding lookups)."""
        return self._slice(name, lambda sl: torch.stack([sl[i : i + 1][0] for i in ids])).float()

    def matvec(self, name: str, x: torch.Tensor, chunk: int = 16384) -> torch.Tensor:
        """``weight @ x`` for a large [out, in] weight, read ``chunk`` rows at a time (the LM head)."""

        def run(sl) -> torch.Tensor:
            out = sl.get_shape()[0]
            return torch.cat([sl[a : min(a + chunk, out)].float() @ x for a in range(0, out, chunk)])

        return self._slice(name, run)


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layer_norm(x: torch.Tensor, W: Weights, name: str, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], W(name + ".weight"), W(name + ".bias"), eps)


def linear(x: torch.Tensor, W: Weights, name: str, bias: bool = True) -> torch.Tensor:
    return F.linear(x, W(name + ".weight"), W(name + ".bias") if bias else None)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q, k, v [heads, n, d] → [n, heads·d] with a causal mask."""
    n = q.shape[1]
    scores = (q @ k.transpose(1, 2)) * scale
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, -1)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def logits_of_last(x: torch.Tensor, W: Weights, head: str) -> torch.Tensor:
    return W.matvec(head, x[-1]).double()


# ----- Kimi-VL ---------------------------------------------------------------------------------------------
def moonvit_features(W: Weights, cfg: dict, patches: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """MoonViT + projector on one image: patches [gh·gw, 3, 14, 14] → [gh·gw / 4, text hidden]."""
    v = cfg["vision_config"]
    d, heads = v["hidden_size"], v["num_attention_heads"]
    hd = d // heads
    gh, gw = grid
    x = F.conv2d(patches.float(), W("vision_tower.patch_embed.proj.weight"), W("vision_tower.patch_embed.proj.bias"))
    x = x.flatten(1)
    pos = W("vision_tower.patch_embed.pos_emb.weight")
    if tuple(pos.shape[:2]) != (gh, gw):
        pos = F.interpolate(pos.permute(2, 0, 1)[None], size=(gh, gw), mode="bicubic")[0].permute(1, 2, 0)
    x = x + pos.reshape(gh * gw, d)
    freqs = 1.0 / (10000 ** (torch.arange(0, hd, 4)[: hd // 4].float() / hd))
    ys, xs = torch.meshgrid(torch.arange(gh).float(), torch.arange(gw).float(), indexing="ij")
    ang = torch.stack([xs.reshape(-1, 1) * freqs, ys.reshape(-1, 1) * freqs], dim=-1).reshape(gh * gw, hd // 2)
    cis = torch.polar(torch.ones_like(ang), ang)[:, None, :]  # [N, 1, hd/2]
    for layer in range(v["num_hidden_layers"]):
        p = f"vision_tower.encoder.blocks.{layer}."
        qkv = linear(layer_norm(x, W, p + "norm0"), W, p + "wqkv").view(-1, 3, heads, hd)
        q, k, val = qkv.unbind(1)
        q = torch.view_as_real(torch.view_as_complex(q.reshape(-1, heads, hd // 2, 2)) * cis).flatten(-2)
        k = torch.view_as_real(torch.view_as_complex(k.reshape(-1, heads, hd // 2, 2)) * cis).flatten(-2)
        att = ((q.transpose(0, 1) @ k.transpose(0, 1).transpose(1, 2)) / math.sqrt(hd)).softmax(-1) @ val.transpose(
            0, 1
        )
        x = x + linear(att.transpose(0, 1).reshape(-1, d), W, p + "wo")
        h = F.gelu(linear(layer_norm(x, W, p + "norm1"), W, p + "mlp.fc0"), approximate="tanh")
        x = x + linear(h, W, p + "mlp.fc1")
    x = layer_norm(x, W, "vision_tower.encoder.final_layernorm")
    kh, kw = v["merge_kernel_size"]
    merged = x.view(gh // kh, kh, gw // kw, kw, d).permute(0, 2, 1, 3, 4).reshape(-1, kh * kw, d)
    h = layer_norm(merged, W, "multi_modal_projector.pre_norm").reshape(merged.shape[0], -1)
    return linear(F.gelu(linear(h, W, "multi_modal_projector.linear_1")), W, "multi_modal_projector.linear_2")


def deepseek_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """The remote DeepSeek-V3 rope: interleaved pairs reordered to halves, then rotate_half. x [..., n, d]."""
    d = x.shape[-1]
    x = x.reshape(*x.shape[:-1], d // 2, 2).transpose(-1, -2).reshape(x.shape)
    inv = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    ang = torch.cat([positions[:, None].float() * inv] * 2, dim=-1)
    return x * ang.cos() + rotate_half(x) * ang.sin()


def kimi_vl_logits(path: Path, ids: list[int], images: list[tuple[torch.Tensor, tuple[int, int]]]) -> torch.Tensor:
    """Next-token logits [vocab] (float64) after ``ids``; ``<|media_pad|>`` rows take the images' features in order."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    t = cfg["text_config"]
    W = Weights(path)
    x = W.rows("language_model.model.embed_tokens.weight", ids)
    pads = [i for i, tok in enumerate(ids) if tok == cfg["media_placeholder_token_id"]]
    if images:
        feats = torch.cat([moonvit_features(W, cfg, p, g) for p, g in images])
        if feats.shape[0] != len(pads):
            raise ValueError(f"{feats.shape[0]} image features for {len(pads)} placeholders")
        x[pads] = feats
    n, heads = len(ids), t["num_attention_heads"]
    nope, rope, vd, eps = t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"], t["rms_norm_eps"]
    pos = torch.arange(n)
    for layer in range(t["num_hidden_layers"]):
        p = f"language_model.model.layers.{layer}."
        h = rms(x, W(p + "input_layernorm.weight"), eps)
        q = linear(h, W, p + "self_attn.q_proj", bias=False).view(n, heads, nope + rope).transpose(0, 1)
        ckv = linear(h, W, p + "self_attn.kv_a_proj_with_mqa", bias=False)
        c, k_pe = ckv[:, : t["kv_lora_rank"]], ckv[:, t["kv_lora_rank"] :]
        kv = linear(rms(c, W(p + "self_attn.kv_a_layernorm.weight"), eps), W, p + "self_attn.kv_b_proj", bias=False)
        kv = kv.view(n, heads, nope + vd).transpose(0, 1)
        q_pe = deepseek_rope(q[..., nope:], pos, t["rope_theta"])
        k_pe = deepseek_rope(k_pe, pos, t["rope_theta"])[None].expand(heads, -1, -1)
        qf = torch.cat([q[..., :nope], q_pe], dim=-1)
        kf = torch.cat([kv[..., :nope], k_pe], dim=-1)
        x = x + linear(
            causal_attention(qf, kf, kv[..., nope:], (nope + rope) ** -0.5), W, p + "self_attn.o_proj", bias=False
        )
        h = rms(x, W(p + "post_attention_layernorm.weight"), eps)
        x = x + (
            deepseek_mlp(W, p + "mlp.", h) if layer < t["first_k_dense_replace"] else deepseek_moe(W, t, p + "mlp.", h)
        )
    x = rms(x, W("language_model.model.norm.weight"), eps)
    return logits_of_last(x, W, "language_model.lm_head.weight")


def deepseek_mlp(W: Weights, p: str, h: torch.Tensor) -> torch.Tensor:
    gate = linear(h, W, p + "gate_proj", bias=False)
    return linear(F.silu(gate) * linear(h, W, p + "up_proj", bias=False), W, p + "down_proj", bias=False)


def deepseek_moe(W: Weights, t: dict, p: str, h: torch.Tensor) -> torch.Tensor:
    """Sigmoid router with the correction bias choosing, unbiased scores weighting (normalised, scaled)."""
    if t["n_group"] != 1 or t["topk_group"] != 1:
        raise NotImplementedError("the reference implements the single-group router Kimi-VL uses")
    scores = F.linear(h, W(p + "gate.weight")).sigmoid()
    chosen = (scores + W(p + "gate.e_score_correction_bias")).topk(t["num_experts_per_tok"], dim=-1).indices
    weights = scores.gather(1, chosen)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * t["routed_scaling_factor"]
    out = deepseek_mlp(W, p + "shared_experts.", h)
    for e in chosen.unique().tolist():
        rows, slot = (chosen == e).nonzero(as_tuple=True)
        out[rows] += weights[rows, slot, None] * deepseek_mlp(W, f"{p}experts.{e}.", h[rows])
    return out


# ----- Phi-3.5-V -------------------------------------------------------------------------------------------
def clip_patches(W: Weights, pixels: torch.Tensor, layers: int) -> torch.Tensor:
    """CLIP ViT-L/14-336 hidden states after ``layers`` layers, CLS dropped: [crops, 576, 1024]."""
    c = "model.vision_embed_tokens.img_processor.vision_model."
    x = F.conv2d(pixels.float(), W(c + "embeddings.patch_embedding.weight"), stride=14).flatten(2).transpose(1, 2)
    cls = W(c + "embeddings.class_embedding").expand(x.shape[0], 1, -1)
    x = torch.cat([cls, x], dim=1) + W(c + "embeddings.position_embedding.weight")
    x = layer_norm(x, W, c + "pre_layrnorm")
    heads = 16
    for layer in range(layers):
        p = f"{c}encoder.layers.{layer}."
        h = layer_norm(x, W, p + "layer_norm1")
        b, n, d = h.shape
        q, k, v = (
            linear(h, W, f"{p}self_attn.{s}_proj").view(b, n, heads, -1).transpose(1, 2) for s in ("q", "k", "v")
        )
        att = ((q @ k.transpose(-1, -2)) * (d // heads) ** -0.5).softmax(-1) @ v
        x = x + linear(att.transpose(1, 2).reshape(b, n, d), W, p + "self_attn.out_proj")
        h = linear(layer_norm(x, W, p + "layer_norm2"), W, p + "mlp.fc1")
        x = x + linear(h * torch.sigmoid(1.702 * h), W, p + "mlp.fc2")
    return x[:, 1:]


def hd_tokens(W: Weights, feats: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The ``sub_glb`` layout, built token by token: crops' merged rows + newline, separator, global + newline."""
    v = "model.vision_embed_tokens."
    newline, sep = W(v + "sub_GN").reshape(-1), W(v + "glb_GN").reshape(-1)

    def block(f: torch.Tensor, r: int, c: int) -> torch.Tensor:  # f [24, 24, C]: patches (2r..2r+1, 2c..2c+1)
        return torch.cat([f[2 * r, 2 * c], f[2 * r, 2 * c + 1], f[2 * r + 1, 2 * c], f[2 * r + 1, 2 * c + 1]])

    hc, wc = size[0] // 336, size[1] // 336
    grids = [f.reshape(24, 24, -1) for f in feats]
    rows = []
    for gr in range(hc * 12):
        for gc in range(wc * 12):
            rows.append(block(grids[1 + (gr // 12) * wc + gc // 12], gr % 12, gc % 12))
        rows.append(newline)
    rows.append(sep)
    for r in range(12):
        rows.extend(block(grids[0], r, c) for c in range(12))
        rows.append(newline)
    x = torch.stack(rows)
    return linear(F.gelu(linear(x, W, v + "img_projection.0")), W, v + "img_projection.2")


def phi3_v_logits(
    path: Path, ids: list[int], images: list[tuple[torch.Tensor, tuple[int, int]]], image_token_id: int = 32044
) -> torch.Tensor:
    """Next-token logits [vocab] (float64) after ``ids``; image-token rows take the images' HD features in order."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    W = Weights(path)
    clip_stored = 1 + max(int(n.split("encoder.layers.")[1].split(".")[0]) for n in W.where if "encoder.layers." in n)
    x = W.rows("model.embed_tokens.weight", [max(0, min(i, cfg["vocab_size"] - 1)) for i in ids])
    slots = [i for i, tok in enumerate(ids) if tok == image_token_id]
    if images:
        feats = torch.cat([hd_tokens(W, clip_patches(W, px, clip_stored - 1), size) for px, size in images])
        if feats.shape[0] != len(slots):
            raise ValueError(f"{feats.shape[0]} image features for {len(slots)} image tokens")
        x[slots] = feats
    n, heads, h = len(ids), cfg["num_attention_heads"], cfg["hidden_size"]
    hd, eps = h // heads, cfg["rms_norm_eps"]
    rope = cfg["rope_scaling"]
    if n > cfg["original_max_position_embeddings"]:
        raise ValueError("the reference implements the short-factor regime (≤ original_max_position_embeddings)")
    inv = 1.0 / (torch.tensor(rope["short_factor"]) * cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    scale = math.sqrt(
        1
        + math.log(cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"])
        / math.log(cfg["original_max_position_embeddings"])
    )
    ang = torch.cat([torch.arange(n)[:, None].float() * inv] * 2, dim=-1)
    cos, sin = ang.cos() * scale, ang.sin() * scale
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        qkv = linear(rms(x, W(p + "input_layernorm.weight"), eps), W, p + "self_attn.qkv_proj", bias=False)
        q, k, v = (t.view(n, heads, hd).transpose(0, 1) for t in qkv.split(h, dim=-1))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + linear(causal_attention(q, k, v, hd**-0.5), W, p + "self_attn.o_proj", bias=False)
        gate, up = linear(
            rms(x, W(p + "post_attention_layernorm.weight"), eps), W, p + "mlp.gate_up_proj", bias=False
        ).chunk(2, -1)
        x = x + linear(F.silu(gate) * up, W, p + "mlp.down_proj", bias=False)
    return logits_of_last(rms(x, W("model.norm.weight"), eps), W, "lm_head.weight")


# ----- InternVL-Chat-V1.1 ----------------------------------------------------------------------------------
def internvit_tokens(W: Weights, cfg: dict, pixels: torch.Tensor) -> torch.Tensor:
    """InternViT-6B to ``hidden_states[select_layer]``, CLS dropped, pixel-shuffled and through ``mlp1``:
    [tiles·256, hidden].

    The stored position grid is the 448-px one, where the remote code's bicubic resampling is the identity."""
    v = cfg["vision_config"]
    c, heads, eps = v["hidden_size"], v["num_attention_heads"], v["layer_norm_eps"]
    e = "vision_model.embeddings."
    x = F.conv2d(pixels.float(), W(e + "patch_embedding.weight"), W(e + "patch_embedding.bias"), stride=v["patch_size"])
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([W(e + "class_embedding").expand(x.shape[0], 1, -1), x], dim=1) + W(e + "position_embedding")

    def norm(t: torch.Tensor, name: str) -> torch.Tensor:
        if v.get("norm_type", "rms_norm") == "rms_norm":
            return rms(t, W(name + ".weight"), eps)
        return layer_norm(t, W, name, eps)

    for layer in range(cfg.get("select_layer", -4) % (v["num_hidden_layers"] + 1)):  # -4: V1.1's config default
        p = f"vision_model.encoder.layers.{layer}."
        h = norm(x, p + "norm1")
        b, n, _ = h.shape
        q, k, val = linear(h, W, p + "attn.qkv", bias=bool(v.get("qkv_bias"))).chunk(3, dim=-1)
        if v.get("qk_normalization", True):  # over all heads at once, before the split
            q, k = rms(q, W(p + "attn.q_norm.weight"), eps), rms(k, W(p + "attn.k_norm.weight"), eps)
        q, k, val = (t.view(b, n, heads, -1).transpose(1, 2) for t in (q, k, val))
        att = ((q * (c // heads) ** -0.5) @ k.transpose(-1, -2)).softmax(-1) @ val
        x = x + linear(att.transpose(1, 2).reshape(b, n, c), W, p + "attn.proj") * W(p + "ls1")
        x = x + linear(F.gelu(linear(norm(x, p + "norm2"), W, p + "mlp.fc1")), W, p + "mlp.fc2") * W(p + "ls2")
    tokens = []
    for tile in x[:, 1:]:
        side = math.isqrt(tile.shape[0])
        g = tile.reshape(side, side, c)  # (patch row, patch column)
        blocks = [(i, j) for i in range(side // 2) for j in range(side // 2)]
        if cfg.get("ps_version", "v1") == "v1":  # the transposed order: column blocks outer
            blocks = [(i, j) for j in range(side // 2) for i in range(side // 2)]
        tokens += [
            torch.cat([g[2 * i, 2 * j], g[2 * i, 2 * j + 1], g[2 * i + 1, 2 * j], g[2 * i + 1, 2 * j + 1]])
            for i, j in blocks
        ]
    y = layer_norm(torch.stack(tokens), W, "mlp1.0")
    return linear(F.gelu(linear(y, W, "mlp1.1")), W, "mlp1.3")


def internvl_chat_logits(
    path: Path, ids: list[int], images: list[tuple[torch.Tensor, tuple[int, int]]], image_token_id: int | None = None
) -> torch.Tensor:
    """Next-token logits [vocab] (float64) after ``ids``; ``<IMG_CONTEXT>`` rows (its id from tokenizer.json unless
    given) take the images' features in order."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    if image_token_id is None:
        added = json.loads((Path(path) / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
        image_token_id = next(a["id"] for a in added if a["content"] == "<IMG_CONTEXT>")
    t = cfg["llm_config"]
    W = Weights(path)
    x = W.rows("language_model.model.embed_tokens.weight", ids)
    slots = [i for i, tok in enumerate(ids) if tok == image_token_id]
    if images:
        feats = torch.cat([internvit_tokens(W, cfg, px) for px, _ in images])
        if feats.shape[0] != len(slots):
            raise ValueError(f"{feats.shape[0]} image features for {len(slots)} image tokens")
        x[slots] = feats
    n, heads, kv, h = len(ids), t["num_attention_heads"], t["num_key_value_heads"], t["hidden_size"]
    hd, eps = h // heads, t["rms_norm_eps"]
    inv = 1.0 / t["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.cat([torch.arange(n)[:, None].float() * inv] * 2, dim=-1)
    cos, sin = ang.cos(), ang.sin()
    for layer in range(t["num_hidden_layers"]):
        p = f"language_model.model.layers.{layer}."
        hn = rms(x, W(p + "input_layernorm.weight"), eps)
        q = linear(hn, W, p + "self_attn.q_proj", bias=False).view(n, heads, hd).transpose(0, 1)
        k, v = (
            linear(hn, W, f"{p}self_attn.{s}_proj", bias=False)
            .view(n, kv, hd)
            .transpose(0, 1)
            .repeat_interleave(heads // kv, dim=0)
            for s in ("k", "v")
        )
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + linear(causal_attention(q, k, v, hd**-0.5), W, p + "self_attn.o_proj", bias=False)
        hn = rms(x, W(p + "post_attention_layernorm.weight"), eps)
        x = x + linear(
            F.silu(linear(hn, W, p + "mlp.gate_proj", bias=False)) * linear(hn, W, p + "mlp.up_proj", bias=False),
            W,
            p + "mlp.down_proj",
            bias=False,
        )
    return logits_of_last(rms(x, W("language_model.model.norm.weight"), eps), W, "language_model.lm_head.weight")
