"""The adapter base: one VLM family read as content + rotary channels, driven span by span.

An adapter does three things the operator needs and nothing else:
1. ``encode``: spans → per-span token ids, input embeddings (vision features merged in once) and
   local positions (1-D, or M-RoPE t/h/w), so any span can be prefilled alone at any position.
2. ``forward``: run the language model over spans placed at chosen positions, on top of a given
   cache and under an optional 4D mask, returning the cache and next-token logits.
3. ``read`` / ``cache``: move KV between the model's cache layout and :class:`ChunkKV`.

Positions are always explicit (transformers 5 takes RoPE only from ``position_ids``; a stale
``rope_deltas`` would silently give wrong logits), and a cache object is always passed (so gapped
positions are never read as packed sequences).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import torch
from PIL import Image
from transformers import DynamicCache

from kamera.core import ChannelSpec, ChunkKV, RotarySpec
from kamera.core.precision import work_dtype
from kamera.items.spans import Audio, Clip, Span, validate_spans

log = logging.getLogger(__name__)


# Bytes of float32 LM-head rows upcast at a time when a low-precision head is applied in float32: on a CPU a
# chunk that stays in cache makes the upcast nearly free; on a GPU large chunks keep kernel launches few.
HEAD_CHUNK_BYTES = {"cpu": 4 << 20, "other": 256 << 20}


@dataclass
class VisionPiece:
    """One image (or one video clip) as the language model sees it: its token ids, which of them carry
    features, and the features for those slots.

    ``kind`` is "image", "video" or "audio"; ``grid_thw`` [3] and, for video, ``second_per_grid`` (seconds
    spanned by one temporal patch) are what M-RoPE families need to place it; for audio, ``feature_len`` (the
    number of feature frames the audio tower read) is what the omni families' rope index reads.
    """

    ids: list[int]
    visual: list[bool]
    features: torch.Tensor  # [n_visual, hidden]
    grid_thw: torch.Tensor | None = None  # [3], M-RoPE families
    deepstack: list[torch.Tensor] | None = None  # per deepstack layer, [n_visual, hidden]
    kind: str = "image"
    second_per_grid: float | None = None
    feature_len: int | None = None


@dataclass
class EncodedSpan:
    """A span ready for the language model: ids [n], embeds [n, hidden], local positions [P, n] from 0."""

    span: Span
    input_ids: torch.Tensor
    embeds: torch.Tensor
    local_pos: torch.Tensor
    extent: int
    visual: torch.Tensor  # [n] bool
    deepstack: list[torch.Tensor] | None = None  # per deepstack layer, [n_visual_in_span, hidden]

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def role(self) -> str:
        return self.span.role


@dataclass
class Encoded:
    """An item's spans, encoded once; ``starts`` are the native start positions of the full layout."""

    spans: list[EncodedSpan]
    starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        pos = 0
        self.starts = []
        for s in self.spans:
            self.starts.append(pos)
            pos += s.extent

    @property
    def n_tokens(self) -> int:
        return sum(s.n_tokens for s in self.spans)

    def index(self, role: str) -> list[int]:
        return [i for i, s in enumerate(self.spans) if s.role == role]

    @property
    def b(self) -> int:
        return self.index("B")[0]

    @property
    def query(self) -> int:
        return len(self.spans) - 1

    def token_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) token offsets of each span in the concatenated native sequence."""
        out, t = [], 0
        for s in self.spans:
            out.append((t, t + s.n_tokens))
            t += s.n_tokens
        return out


Placed = list[tuple[EncodedSpan, int]]


def kv_channels(text_config, rotary: RotarySpec) -> tuple[ChannelSpec, ChannelSpec]:
    """GQA / MHA cache layout: K (rotary) and V (content), each [kv_heads, head_dim]."""
    c = text_config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return (ChannelSpec("k", kv, head_dim, rotary), ChannelSpec("v", kv, head_dim))


def place(spans: list[EncodedSpan], start: int = 0) -> Placed:
    """Lay spans end to end from position ``start`` (each span advances by its extent)."""
    out, pos = [], start
    for s in spans:
        out.append((s, pos))
        pos += s.extent
    return out


def additive_mask(allow: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[q, kv] bool (True = may attend) → [1, 1, q, kv] additive float mask (works for sdpa and eager)."""
    m = torch.zeros(allow.shape, dtype=dtype, device=allow.device)
    m.masked_fill_(~allow, torch.finfo(dtype).min)
    return m[None, None]


@dataclass
class ForwardOut:
    """What a language-model forward leaves: the cache it filled and the final hidden state of its last token;
    ``logits`` [vocab] float32 are computed from it on first use (many forwards, e.g. B's canonical
    prefill, are run only for their cache and never pay for the LM head).

    ``attn_implementation`` is the attention kernel that produced them (a forward under a 4D mask runs
    ``sdpa`` even when the model was loaded with flash-attention 2; rows can say so).
    """

    cache: DynamicCache
    hidden: torch.Tensor  # [hidden] final hidden state of the last token (after the final norm)
    positions: torch.Tensor  # [P, q] the positions this forward used
    head: Callable[[torch.Tensor], torch.Tensor] = field(repr=False, default=lambda h: h)
    attn_implementation: str = ""

    @cached_property
    def logits(self) -> torch.Tensor:
        """Next-token logits [vocab], float32 (the LM head applied in float32, see :meth:`Adapter.logits`)."""
        return self.head(self.hidden)


MASK_KERNELS = ("sdpa", "eager")  # kernels that take an arbitrary 4D additive mask


class Adapter:
    """Base adapter; subclasses implement the family hooks marked below."""

    family: str = ""
    attention: str = ""  # "GQA", "MHA" or "MLA"
    position_rows: int = 1  # 3 for M-RoPE
    takes_video: bool = False  # a Clip part is the model's own video input; otherwise its frames are images
    chat: tuple[str, str] | None = None  # (header, footer) wrapped around the item for instruct checkpoints
    reads_images: ClassVar[bool] = False  # the family has a vision path: set for each subclass by its _pixels hook

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.reads_images = cls._pixels is not Adapter._pixels  # a text-only family keeps the base hook

    def __init__(self, model: torch.nn.Module, tokenizer, image_processor=None, name: str = "") -> None:
        self.model = model.eval()
        self.name = name or type(model).__name__
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.text_config = model.config.get_text_config(decoder=True)
        self.lm = self._language_model()
        self.head = model.get_output_embeddings()
        self.specs: tuple[ChannelSpec, ...] = self._channel_specs()
        self.forwards: Counter[str] = Counter()
        self.kernels: Counter[str] = Counter()  # forwards per attention kernel actually used
        self.video_pixels: tuple[int, int] | None = None  # (min, max) pixels per video frame, if set
        self.checkpoint: Path | None = None  # the checkpoint directory a paper model was loaded from

    # ----- family hooks ------------------------------------------------------------------------
    def _language_model(self) -> torch.nn.Module:
        """The decoder stack (no LM head) that takes ``inputs_embeds`` and ``position_ids``."""
        return self.model.model.language_model

    def _channel_specs(self) -> tuple[ChannelSpec, ...]:
        raise NotImplementedError

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        """The vision tower's inputs for one image (``pixel_values`` and, if any, ``image_grid_thw``)."""
        raise NotImplementedError(f"{type(self).__name__} ({self.family}) does not take images")

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Vision features [n_visual, hidden] of one image, and its deepstack features if the family has them."""
        raise NotImplementedError

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        """Token ids an image of n visual tokens occupies (as the family's processor expands its image
        placeholder), and which of them carry features."""
        raise NotImplementedError

    def _video(self, clip: Clip) -> VisionPiece:
        """One clip as the model's own video input (families with ``takes_video``)."""
        raise NotImplementedError(f"{type(self).__name__} ({self.family}) has no video input")

    def _audio(self, audio: Audio) -> VisionPiece:
        """One stretch of audio as the model's own audio input (families with an audio tower)."""
        raise NotImplementedError(f"{self.name} ({self.family}) does not take audio; audio chunks need an omni model")

    def _vision(self, image: Image.Image) -> VisionPiece:
        pixels = {k: v.to(self.device) for k, v in self._pixels(image).items()}
        feats, deep = self._features(pixels)
        ids, visual = self._image_ids(int(feats.shape[0]), pixels)
        if sum(visual) != feats.shape[0]:
            raise RuntimeError(f"{self.name}: {sum(visual)} image slots for {feats.shape[0]} feature rows")
        return VisionPiece(ids, visual, feats, pixels.get("image_grid_thw", [None])[0], deep)

    def _local_positions(self, ids: torch.Tensor, pieces: list[VisionPiece]) -> torch.Tensor:
        """Positions [P, n + 1] of a span encoded alone from 0, plus the position a text token following it
        would take (the span's extent: where the next span starts). 1-D RoPE by default."""
        return torch.arange(ids.numel() + 1, device=ids.device)[None]

    def _forward_extras(self, placed: Placed) -> dict:
        """Family-specific language-model kwargs for a forward over ``placed`` (e.g. deepstack)."""
        return {}

    def _token_extras(self, ids: torch.Tensor) -> dict:
        """Family-specific language-model kwargs that follow from token ids [1, q] alone, for decoded tokens
        (Gemma-3n's per-layer inputs)."""
        return {}

    def _attention_mask(self, mask: torch.Tensor | None, cache: DynamicCache, n_new: int):
        """What the language model takes as ``attention_mask`` for a 4D additive ``mask`` [1, 1, q, past + q] over
        ``n_new`` new tokens on ``cache`` (a family with sliding-window layers gives each layer type its own)."""
        return mask

    def new_cache(self, data: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
        """A cache for this model, holding ``data`` (keys, values [1, kv_heads, n, head_dim] per cache layer) when
        given; every cache the adapter builds comes from here (a family whose cache layers need setting up first,
        e.g. sliding-window layers that must keep every row, overrides it)."""
        return DynamicCache(ddp_cache_data=data, config=self.text_config)

    # ----- properties --------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings (the first of a multi-GPU split)."""
        return self.lm.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype of the decoder stack (the vocabulary matrices may be stored narrower)."""
        return next(self.lm.layers.parameters()).dtype

    @property
    def n_layers(self) -> int:
        return int(self.text_config.num_hidden_layers)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.text_config, "max_position_embeddings", 1 << 30))

    @property
    def attn_implementation(self) -> str:
        return str(self.lm.config._attn_implementation)

    def rotary(self) -> RotarySpec:
        """The rotary spec of the rotating channel, from the model's own inverse frequencies."""
        inv_freq = self.lm.rotary_emb.inv_freq.detach().float().cpu()
        return RotarySpec(self.rotary_layout(), inv_freq, 2 * inv_freq.numel())

    def rotary_layout(self) -> str:
        return "half"

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of decoder layer ``layer`` in cache slots (a row attends the last ``window`` slots up to
        its own), or None for full attention; the layer driver (:mod:`kamera.reuse.recompute`) masks by it."""
        return None

    def layer_rotary_embeddings(self, layer: int, hidden: torch.Tensor, position_ids: torch.Tensor):
        """The (cos, sin) decoder layer ``layer`` rotates with at ``position_ids`` (a family whose layer types have
        their own RoPE bases, :mod:`kamera.models.sliding`, picks the layer's)."""
        return self.lm.rotary_emb(hidden, position_ids)

    def refuses(self, need: str) -> str | None:
        """Why this model cannot serve ``need``, or None. ``need`` is a shared quantity a plugin reads
        (:data:`kamera.reuse.plugin.SHARED`) or ``"layers"``: the decoder driven one layer at a time over chosen
        rows (:mod:`kamera.reuse.recompute`, for token and layer recompute and per-layer attention reads), which
        builds a full-attention row mask and so cannot drive a sliding-window or recurrent layer."""
        if need == "layers":
            types = set(getattr(self.text_config, "layer_types", None) or ())
            if types - {"full_attention"}:
                return (f"{self.name} has non-full-attention layers {sorted(types)}; the layer driver (token or layer "
                        "recompute, per-layer attention reads) builds a full-attention row mask only")
        return None

    @contextmanager
    def attention_kernel(self, impl: str) -> Iterator[None]:
        """Run the language model with attention kernel ``impl`` inside the block, then restore the loaded one."""
        before = self.attn_implementation
        if impl != before:
            self.lm.set_attn_implementation(impl)
        try:
            yield
        finally:
            if impl != before:
                self.lm.set_attn_implementation(before)

    # ----- text --------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def letter_ids(self, letters: str) -> list[int]:
        """Token id of each choice letter as the first answer token (the letter alone)."""
        out = []
        for ch in letters:
            ids = self.tokenize(ch)
            if not ids:
                raise ValueError(f"tokenizer maps choice letter {ch!r} to no token")
            out.append(ids[0])
        return out

    # ----- encoding ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, spans: list[Span]) -> Encoded:
        """Encode an item's spans once; vision features are computed here and reused by every arm."""
        validate_spans(spans)
        enc = Encoded([self.encode_span(s) for s in self._with_chat(spans)])
        total = enc.starts[-1] + enc.spans[-1].extent
        if total > self.max_positions:
            raise ValueError(
                f"item needs {total} positions but {self.name} has a context of {self.max_positions}; "
                "drop it with the benchmark's length filter"
            )
        return enc

    def _with_chat(self, spans: list[Span]) -> list[Span]:
        """Put the chat header in the prefix span (creating one) and the footer at the end of the query."""
        if not self.chat:
            return spans
        header, footer = self.chat
        spans = list(spans)
        if spans[0].role == "prefix":
            spans[0] = Span("prefix", (header, *spans[0].parts), spans[0].name, spans[0].meta)
        else:
            spans.insert(0, Span("prefix", (header,), "chat"))
        q = spans[-1]
        spans[-1] = Span("query", (*q.parts, footer), q.name, q.meta)
        return spans

    def runs(self, span: Span) -> list[str | Image.Image | Clip | Audio]:
        """A span's parts as the model reads them: adjacent text joined into one run (a SentencePiece
        tokenizer gives different ids for "a" + " b" tokenized apart than for "a b"), empty text dropped,
        and a clip split into its frames (as separate images) unless the family takes video."""
        out: list[str | Image.Image | Clip | Audio] = []
        for part in span.parts:
            pieces = part.frames if isinstance(part, Clip) and not self.takes_video else (part,)
            for p in pieces:
                if isinstance(p, str) and out and isinstance(out[-1], str):
                    out[-1] += p
                else:
                    out.append(p)
        return [p for p in out if not (isinstance(p, str) and p == "")]

    def encode_span(self, span: Span) -> EncodedSpan:
        ids: list[int] = []
        visual: list[bool] = []
        pieces: list[VisionPiece] = []
        for part in self.runs(span):
            if isinstance(part, str):
                t = self.tokenize(part)
                ids += t
                visual += [False] * len(t)
                continue
            if isinstance(part, Audio):
                piece = self._audio(part)
            else:
                piece = self._video(part) if isinstance(part, Clip) else self._vision(part.convert("RGB"))
            pieces.append(piece)
            ids += piece.ids
            visual += piece.visual
        if not ids:
            raise ValueError(f"span {span.role!r} {span.name!r} encodes to no tokens")
        dev = self.device
        ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
        vis_t = torch.tensor(visual, dtype=torch.bool, device=dev)
        embeds = self.embed(ids_t.masked_fill(vis_t, 0))
        if pieces:
            feats = torch.cat([p.features for p in pieces]).to(dev, embeds.dtype)
            embeds = embeds.masked_scatter(vis_t[:, None], feats)
        deepstack = None
        if pieces and pieces[0].deepstack is not None:
            deepstack = [
                torch.cat([p.deepstack[k] for p in pieces]).to(dev, embeds.dtype)
                for k in range(len(pieces[0].deepstack))
            ]
        pos = self._local_positions(ids_t, pieces)
        return EncodedSpan(span, ids_t, embeds, pos[:, :-1], int(pos[:, -1].max()), vis_t, deepstack)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of ``ids`` in the stack's compute dtype (rows are gathered, then upcast)."""
        return self.lm.get_input_embeddings()(ids.to(self.device)).to(self.dtype)

    # ----- forwards ----------------------------------------------------------------------------
    def position_ids(self, pos: torch.Tensor) -> torch.Tensor:
        """[P, q] positions → the model's ``position_ids`` ([1, q] or [3, 1, q])."""
        return pos[0][None] if self.position_rows == 1 else pos[:, None, :]

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [vocab] in float32 (float64 for a float64 model) from one final hidden state [hidden].

        The LM head is applied in float32 whatever the narrower model dtype (the paper's KL is float32), in
        float64 where the hidden state or the head is float64 (:func:`kamera.core.precision.work_dtype`): the
        hidden state is upcast and the head's rows are upcast a chunk at a time (``HEAD_CHUNK_BYTES``), so
        a bf16 head of 152k rows never needs a full float32 copy. Equal to an fp32 head on the same weights.
        A config that sets ``final_logit_softcapping`` (Gemma families) gets its cap applied as the model's own
        forward does, cap·tanh(logits / cap), so KL and the argmax are those of the model's distribution.
        """
        w = self.head.weight
        bias = getattr(self.head, "bias", None)
        work = torch.promote_types(work_dtype(w.dtype), work_dtype(hidden.dtype))
        h = hidden.to(w.device, work)
        if w.dtype == work:
            out = torch.mv(w, h)
        else:
            size = torch.empty((), dtype=work).element_size()
            rows = max(1, HEAD_CHUNK_BYTES["cpu" if w.device.type == "cpu" else "other"] // (size * w.shape[1]))
            out = torch.empty(w.shape[0], dtype=work, device=w.device)
            for i in range(0, w.shape[0], rows):
                torch.mv(w[i : i + rows].to(work), h, out=out[i : i + rows])
        out = out if bias is None else out + bias.to(work)
        cap = getattr(self.text_config, "final_logit_softcapping", None)
        return out if not cap else cap * torch.tanh(out / cap)

    @torch.no_grad()
    def forward(
        self,
        placed: Placed,
        cache: DynamicCache | None = None,
        mask: torch.Tensor | None = None,
        tag: str = "forward",
    ) -> ForwardOut:
        """Run the language model over ``placed`` spans (appending to ``cache``, or a fresh one).

        A 4D ``mask`` needs a kernel that takes one: under flash-attention 2 such a forward runs
        ``sdpa`` (and says so in ``ForwardOut.attn_implementation``)."""
        if not placed:
            raise ValueError("forward needs at least one span")
        embeds = torch.cat([s.embeds for s, _ in placed])[None]
        pos = torch.cat([s.local_pos + start for s, start in placed], dim=-1)
        cache = cache if cache is not None else self.new_cache()
        impl = self.attn_implementation
        if mask is not None and impl not in MASK_KERNELS:
            impl = "sdpa"
        with self.attention_kernel(impl):
            out = self.lm(
                inputs_embeds=embeds,
                position_ids=self.position_ids(pos),
                cache=cache,
                attention_mask=self._attention_mask(mask, cache, embeds.shape[1]),
                use_cache=True,
                **self._forward_extras(placed),
            )
        self.forwards[tag] += 1
        self.kernels[impl] += 1
        return ForwardOut(cache, out.last_hidden_state[0, -1], pos, self.logits, impl)

    # ----- cache <-> ChunkKV -------------------------------------------------------------------
    def read(self, cache: DynamicCache, start: int, stop: int, positions: torch.Tensor) -> ChunkKV:
        """Tokens [start, stop) of ``cache`` as a ChunkKV at ``positions`` [P, stop − start] (copied)."""
        layers = []
        for layer in cache.layers[: self.n_layers]:
            k = layer.keys[0, :, start:stop].transpose(0, 1).contiguous()
            v = layer.values[0, :, start:stop].transpose(0, 1).contiguous()
            layers.append((k, v))
        return ChunkKV(self.specs, layers, positions.clone())

    def cache(self, chunks: list[ChunkKV]) -> DynamicCache:
        """A fresh cache holding ``chunks`` end to end, ready for a query forward."""
        n_layers = self.n_layers
        data = []
        for l in range(n_layers):
            k = torch.cat([c.layers[l][0] for c in chunks]).transpose(0, 1)[None]
            v = torch.cat([c.layers[l][1] for c in chunks]).transpose(0, 1)[None]
            data.append((k.contiguous(), v.contiguous()))
        return self.new_cache(data)

    # ----- decoding ----------------------------------------------------------------------------
    def decode_cache(self, cache: DynamicCache) -> DynamicCache:
        """A new cache over ``cache``'s tensors for decoding to append to, never the arm's own cache (a family
        whose cache layers hold recurrent state, updated in place, overrides it with a copy)."""
        return self.new_cache([(layer.keys, layer.values) for layer in cache.layers[: self.n_layers]])

    @torch.no_grad()
    def greedy(self, out: ForwardOut, max_new_tokens: int = 16, stop_ids: tuple[int, ...] = ()) -> list[int]:
        """Greedy-decode after a query forward, continuing (a copy of) its cache and its positions."""
        tokens: list[int] = []
        cache = self.decode_cache(out.cache)
        logits, nxt = out.logits, int(out.positions.max()) + 1
        for _ in range(max_new_tokens):
            tok = int(logits.argmax())
            if tok in stop_ids:
                break
            tokens.append(tok)
            pos = torch.full((self.position_rows, 1), nxt, dtype=torch.long, device=self.device)
            ids = torch.tensor([[tok]], device=self.device)
            h = self.lm(
                inputs_embeds=self.embed(ids),
                position_ids=self.position_ids(pos),
                cache=cache,
                use_cache=True,
                **self._token_extras(ids),
            ).last_hidden_state
            self.forwards["decode"] += 1
            logits = self.logits(h[0, -1])
            nxt += 1
        return tokens

    def stop_ids(self) -> tuple[int, ...]:
        eos = getattr(self.text_config, "eos_token_id", None) or getattr(self.model.config, "eos_token_id", None)
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
