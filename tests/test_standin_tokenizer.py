"""The stand-in tokenizer of shaped checkpoints: real vocabulary size, specials at their ids, lossless text."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from kamera.models.standin_tokenizer import standin_tokenizer, write_standin_tokenizer

# A Kimi-VL-like layout: specials at the top of a 163,840-id vocabulary, one special at a low id.
SPECIALS = {"[BOS]": 163584, "[EOS]": 163585, "<|media_pad|>": 163606, "<|im_end|>": 163586, "<low>": 7}


def test_specials_sit_at_their_ids_and_the_vocabulary_has_the_real_size(tmp_path):
    path = write_standin_tokenizer(tmp_path, 163840, SPECIALS, bos_token="[BOS]", eos_token="[EOS]",
                                   chat_template="{{ messages[0]['content'] }}")
    tok = AutoTokenizer.from_pretrained(path)
    assert len(tok) == 163840
    for t, i in SPECIALS.items():
        assert tok.convert_tokens_to_ids(t) == i
    assert (tok.bos_token_id, tok.eos_token_id) == (163584, 163585)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi"


def test_text_round_trips_and_specials_are_single_tokens():
    tok = standin_tokenizer(4096, SPECIALS | {"[BOS]": 4000, "[EOS]": 4001, "<|media_pad|>": 4002, "<|im_end|>": 4003})
    text = "Ünïcode, spaces  and\nnewlines: 42 — ok"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode("utf-8"))  # one id per byte, no merges
    assert tok.decode(ids) == text
    assert 7 not in ids  # the low special never comes out of ordinary text
    pad = tok.encode("a<|media_pad|><|media_pad|>b", add_special_tokens=False)
    assert pad[1:3] == [4002, 4002] and len(pad) == 4


@pytest.mark.parametrize(
    ("vocab", "specials", "match"),
    [(100, {"<x>": 5}, "cannot hold"), (300, {"<x>": 300}, "outside"), (300, {"<x>": 3, "<y>": 3}, "share an id")],
)
def test_bad_layouts_are_refused(vocab, specials, match):
    with pytest.raises(ValueError, match=match):
        standin_tokenizer(vocab, specials)


def test_a_named_bos_must_be_a_special():
    with pytest.raises(ValueError, match="not among the special tokens"):
        standin_tokenizer(1000, {"<x>": 900}, bos_token="<s>")


def test_a_llama_style_stand_in_adds_bos_only_when_asked(tmp_path):
    path = write_standin_tokenizer(tmp_path, 1024, {"<s>": 1000, "</s>": 1001}, bos_token="<s>", eos_token="</s>",
                                   add_bos_token=True)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok("hi")["input_ids"] == [1000, *tok.encode("hi", add_special_tokens=False)]
    assert tok.encode("hi", add_special_tokens=False)[0] != 1000
    with pytest.raises(ValueError, match="needs a bos_token"):
        standin_tokenizer(1024, {"<s>": 1000}, add_bos_token=True)


def test_byte_token_ids_do_not_depend_on_the_process():
    """The byte alphabet is a set (its order varies with string hashing): ids follow the sorted symbols, so two
    writes of one shaped checkpoint carry the same tokenizer.json."""
    from tokenizers import pre_tokenizers

    vocab = standin_tokenizer(1000, {"<s>": 0}).get_vocab()
    ids = [vocab[s] for s in sorted(pre_tokenizers.ByteLevel.alphabet())]
    assert ids == sorted(ids) and ids[0] == 1
