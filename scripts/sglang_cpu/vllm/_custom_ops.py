"""vLLM's `rotary_embedding` kernel in plain torch, for SGLang 0.5.23 on a CPU (README.md beside it).

The kernel's contract (vLLM csrc/pos_encoding_kernels.cu, called by SGLang's RotaryEmbedding.forward_cuda): rotate,
in place, the first `rotary_dim` channels of every head of `query` and `key` by the angle of each token's position,
where `cos_sin_cache[p] = [cos(p·θ_0..θ_{r/2-1}) | sin(p·θ_0..θ_{r/2-1})]` (`[max_pos, rotary_dim]`). NeoX pairs
channel i with i + r/2; GPT-J pairs 2i with 2i + 1.
"""

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, neox: bool) -> None:
    """x: [tokens, heads, head_size], rotated in place; cos, sin: [tokens, 1, rotary_dim / 2]."""
    rot = x[..., :rotary_dim]
    if neox:
        a, b = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2 :]
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
    a_new, b_new = a * cos - b * sin, b * cos + a * sin
    a.copy_(a_new)
    b.copy_(b_new)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    """In place: query, key `[tokens, heads * head_size]` or `[tokens, heads, head_size]`; positions `[tokens]`."""
    rotary_dim = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions.flatten().long()].to(query.dtype).unsqueeze(1).chunk(2, dim=-1)
    for x in (query, key):
        if x is not None:
            _rotate(x.view(x.shape[0], -1, head_size), cos, sin, rotary_dim, is_neox)
