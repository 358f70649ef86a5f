"""A stand-in tokenizer with a real model's vocabulary size and special tokens at their real ids.

Shaped checkpoints (a paper model's real dimensions and file layout, random weights) need a
tokenizer. Where the real one cannot be shipped or fetched (Kimi-VL's 163,840-token TikToken,
DeepSeek-VL's 102,400, SmolVLM2's 49,152), this builds one with the ``tokenizers`` library that
has what the harness relies on: the vocabulary size (so the embedding and LM head keep their real
shapes), every special token at the model's own id (so image placeholders and chat markers are
the ids the model's config names), and a byte-level model that round-trips any text.

Layout: the 256 byte symbols take the lowest ids not claimed by a special token; every remaining
id holds an inert filler token (``<|standin_N|>``) that no text ever encodes to. There are no
merges, so ordinary text encodes to one token per UTF-8 byte: token counts are larger than the
real tokenizer's, which only lengthens items, never changes what the operator does.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast


def standin_tokenizer(
    vocab_size: int,
    specials: dict[str, int],
    *,
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    unk_token: str | None = None,
    chat_template: str | None = None,
    add_bos_token: bool = False,
) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer of ``vocab_size`` ids with ``specials`` (token → id) at their ids.

    ``bos_token`` … ``unk_token`` name tokens of ``specials`` the tokenizer reports as its
    bos / eos / pad / unk; ``chat_template`` is stored as the tokenizer's template;
    ``add_bos_token`` makes encoding with special tokens start with the BOS token, as Llama-style
    tokenizers do.
    """
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size {vocab_size} cannot hold 256 byte tokens and {len(specials)} specials")
    bad = {t: i for t, i in specials.items() if not 0 <= i < vocab_size}
    if bad:
        raise ValueError(f"special token ids outside [0, {vocab_size}): {bad}")
    if len(set(specials.values())) != len(specials):
        raise ValueError(f"two special tokens share an id: {specials}")
    named = {k: v for k, v in dict(bos_token=bos_token, eos_token=eos_token, pad_token=pad_token,
                                   unk_token=unk_token).items() if v is not None}
    missing = {k: v for k, v in named.items() if v not in specials}
    if missing:
        raise ValueError(f"{missing} are not among the special tokens {sorted(specials)}")
    if add_bos_token and bos_token is None:
        raise ValueError("add_bos_token needs a bos_token")

    taken = set(specials.values())
    free = (i for i in range(vocab_size) if i not in taken)
    vocab = {sym: next(free) for sym in sorted(pre_tokenizers.ByteLevel.alphabet())}  # a set: sorted, so ids never vary
    vocab.update(specials)
    vocab.update({f"<|standin_{i}|>": i for i in free})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in sorted(specials, key=specials.get)])
    if add_bos_token:
        bos = (bos_token, specials[bos_token])
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos[0]} $A", pair=f"{bos[0]} $A $B", special_tokens=[bos]
        )
    out = PreTrainedTokenizerFast(tokenizer_object=tok, **named)
    if chat_template is not None:
        out.chat_template = chat_template
    return out


def write_standin_tokenizer(out: str | Path, vocab_size: int, specials: dict[str, int], **kwargs) -> Path:
    """Build the stand-in tokenizer and save it in the Hub layout under ``out`` (tokenizer.json + config)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    standin_tokenizer(vocab_size, specials, **kwargs).save_pretrained(out)
    return out
