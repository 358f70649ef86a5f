"""The toy binding models (transformers' own classes), their word tokenizer, and ``load``.

Two variants share one decoder (2 layers, hidden 128, 4 heads, 2 KV heads of 32, MLP 256, RoPE, tied
embeddings) and one task (:mod:`kamera.toy.task`):
- ``text``: a Qwen2ForCausalLM; A and B are words.
- ``image`` (the default): a Qwen2_5_VLForConditionalGeneration; A and B are pictures
  (:mod:`kamera.toy.render`) through a one-block vision tower, with M-RoPE positions.
With two layers the only route to a two-hop answer runs through B's states (layer 0 at B's object
fetches the colour from A; layer 1 at the query reads it there), so blind reuse of B removes it and
the patch restores it. A third variant, ``window`` (``toy_window``), is the text decoder trained on the toy
window task (:mod:`kamera.toy.window_task`). Shipped weights live in ``kamera/toy/weights/<variant>/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers as tf

from kamera.models.base import Adapter
from kamera.models.qwen_vl import QwenVLAdapter
from kamera.models.text import TextAdapter
from kamera.toy.render import CELL
from kamera.toy.task import DEFAULT_VARIANT, VARIANTS, TaskSpec
from kamera.toy.window_task import WindowSpec

WEIGHTS = Path(__file__).parent / "weights"
MODEL_VARIANTS: tuple[str, ...] = (*VARIANTS, "window")  # window: the text decoder on the toy window task
NAMES = {"text": "toy_binding", "image": "toy_binding", "window": "toy_window"}  # the adapter's name
TOY_FILE = "toy.json"  # the task spec and vocabulary the weights were trained with

# 2 layers, hidden 128, 4 heads of 32, GQA with 2 KV heads (K/V width 64), MLP 256, RoPE, tied embeddings.
DECODER = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rope_parameters=dict(rope_type="default", rope_theta=10000.0),
)
# The image variant's vision tower: one block attending within one merged token (window = one 28-px cell, no
# full-attention block), so each cell's visual token depends on that cell alone. M-RoPE t/h/w sections 4/6/6.
VISION = dict(
    depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=DECODER["hidden_size"],
    patch_size=CELL // 2, spatial_merge_size=2, temporal_patch_size=2, window_size=CELL, fullatt_block_indexes=[],
)
MROPE_SECTION = [4, 6, 6]
MAX_PIXELS = (CELL * 8) ** 2


class WordTokenizer:
    """Whitespace tokenizer over a closed vocabulary: each word is one token; unknown words are an error."""

    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2

    def __init__(self, vocab: list[str]) -> None:
        if len(set(vocab)) != len(vocab):
            raise ValueError("the vocabulary has duplicate words")
        self.vocab = list(vocab)
        self.ids = {w: i for i, w in enumerate(self.vocab)}
        self.specials = {i for i, w in enumerate(self.vocab) if w.startswith("<") and w.endswith(">")}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids of the whitespace-separated words of ``text`` (bos first if ``add_special_tokens``)."""
        unknown = [w for w in text.split() if w not in self.ids]
        if unknown:
            raise ValueError(f"words not in the toy vocabulary: {unknown[:5]}")
        ids = [self.ids[w] for w in text.split()]
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Words of ``ids`` joined by spaces (specials dropped if ``skip_special_tokens``)."""
        return " ".join(self.vocab[i] for i in ids if not (skip_special_tokens and i in self.specials))


def image_processor() -> tf.Qwen2VLImageProcessorPil:
    """Qwen2-VL pixels at 14-px patches, 2 × 2 merge; toy images are multiples of 28 px and never resized."""
    return tf.Qwen2VLImageProcessorPil(
        patch_size=VISION["patch_size"], merge_size=2, temporal_patch_size=2, min_pixels=CELL**2, max_pixels=MAX_PIXELS
    )


def check_variant(variant: str) -> None:
    if variant not in MODEL_VARIANTS:
        raise ValueError(f"toy variant must be one of {MODEL_VARIANTS}, got {variant!r}")


def build(spec: TaskSpec, variant: str) -> tuple[torch.nn.Module, WordTokenizer]:
    """A freshly initialised toy model and its tokenizer for ``spec`` (Qwen2, or Qwen2.5-VL for images)."""
    check_variant(variant)
    tok = WordTokenizer(spec.vocab())
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    text = dict(vocab_size=len(tok), **ids, **DECODER)
    if variant in ("text", "window"):
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**text)), tok
    text["rope_parameters"] = dict(DECODER["rope_parameters"], mrope_section=MROPE_SECTION)
    config = tf.Qwen2_5_VLConfig(
        text_config=text, vision_config=VISION, tie_word_embeddings=True, **ids,
        image_token_id=tok.ids["<image>"], vision_start_token_id=tok.ids["<vision_start>"],
        vision_end_token_id=tok.ids["<vision_end>"],
    )
    return tf.Qwen2_5_VLForConditionalGeneration(config), tok


def save(model: torch.nn.Module, tok: WordTokenizer, spec: TaskSpec, variant: str, out: Path) -> None:
    """Write the weights (safetensors), the model config and ``toy.json`` (variant, task spec, vocabulary)."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / TOY_FILE).write_text(json.dumps({"variant": variant, "task": spec.to_dict(), "vocab": tok.vocab}, indent=1))


def read_spec(path: Path) -> tuple[str, TaskSpec, WordTokenizer]:
    """The variant, task spec and tokenizer saved beside a set of toy weights."""
    meta_file = Path(path) / TOY_FILE
    if not meta_file.is_file():
        raise FileNotFoundError(
            f"no toy model at {path} ({TOY_FILE} missing); train one with python -m kamera.toy.train"
        )
    meta = json.loads(meta_file.read_text())
    spec = (WindowSpec if meta["variant"] == "window" else TaskSpec)(**meta["task"])
    return meta["variant"], spec, WordTokenizer(meta["vocab"])


def load(
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    attn_implementation: str = "sdpa",
    variant: str = DEFAULT_VARIANT,
    path: str | Path | None = None,
) -> Adapter:
    """The trained toy model in its adapter (shipped weights of ``variant``, or a directory ``path``).

    The adapter carries ``task`` (the TaskSpec) and ``variant``, so ``items(adapter.task, kind, n,
    variant=adapter.variant)`` gives items it was trained for.
    """
    check_variant(variant)
    path = Path(path) if path is not None else WEIGHTS / variant
    variant, spec, tok = read_spec(path)
    if variant in ("text", "window"):
        model = tf.Qwen2ForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)
        adapter = TextAdapter(model.to(device), tok, name=NAMES[variant])
    else:
        model = tf.Qwen2_5_VLForConditionalGeneration.from_pretrained(
            path, dtype=dtype, attn_implementation=attn_implementation
        )
        adapter = QwenVLAdapter(model.to(device), tok, image_processor(), name=NAMES[variant])
    adapter.task, adapter.variant = spec, variant
    return adapter


def load_text(**kwargs) -> Adapter:
    """The text variant (A and B as words; a plain Qwen2 decoder)."""
    return load(**kwargs, variant="text")


def load_window(**kwargs) -> Adapter:
    """The window variant: the text decoder trained on the toy window task (:mod:`kamera.toy.window_task`)."""
    return load(**kwargs, variant="window")


def load_image(**kwargs) -> Adapter:
    """The image variant (A and B as pictures through a tiny Qwen2.5-VL vision tower and M-RoPE)."""
    return load(**kwargs, variant="image")
