"""Text inside a span is tokenized as the joined run a model would see, not part by part."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as tf
from tinyfamilies import noise_image

from kamera.items.spans import Span
from kamera.models.text import TextAdapter

LLAMA2 = Path(__file__).resolve().parents[2].parent / "shared" / "tokenizers" / "llama2"

# (parts of one span) — the splits a benchmark's prompt template produces: option lines, question leads
PROMPTS = [
    ("Question:", " What is shown?"),
    ("The answer is", " A."),
    ("\nA. ", "red", "\nB. ", "blue"),
    ("Select the best answer.", "\n", "The best answer is:"),
    ("Frame 3", " shows a cat", " on a mat."),
    ("(A)", " yes", " (B)", " no"),
    ("hello", "world"),
    ("Read the passage", ": ", "It rained."),
    ("Count the", " apples", "."),
    ("Which colour", "?", " Answer with a letter."),
    ("Paragraph 1", "\n\n", "Paragraph 2"),
    ("  indented", " text"),
    ("1.", " first", "\n2.", " second"),
    ("Q: ", "Why?", " A: ", "Because."),
    ("e.g.", " this", " and that"),
    ("über", " straße"),
    ("x", "y", "z"),
    ("Answer", ":"),
    ("The needle", " is", " hidden", " here."),
    ("End of document", ".", "\nQuestion", ": where?"),
]


@pytest.fixture(scope="module")
def llama_text_adapter():
    if not (LLAMA2 / "tokenizer.json").is_file():
        pytest.skip("the real Llama-2 tokenizer is not beside this checkout (../shared/tokenizers/llama2)")
    tok = tf.AutoTokenizer.from_pretrained(LLAMA2)
    cfg = tf.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(0)
    return TextAdapter(tf.LlamaForCausalLM(cfg), tok, name="llama2_text")


def test_a_spans_text_runs_tokenize_as_the_joined_text(llama_text_adapter):
    a, tok = llama_text_adapter, llama_text_adapter.tokenizer
    apart = 0
    for parts in PROMPTS:
        joined = tok.encode("".join(parts), add_special_tokens=False)
        assert a.encode_span(Span("B", parts)).input_ids.tolist() == joined, parts
        apart += [i for p in parts for i in tok.encode(p, add_special_tokens=False)] != joined
    assert apart >= 5  # part-by-part tokenization really differs (an extra "▁" per SentencePiece piece)


def test_images_still_split_text_runs(tiny):
    adapter = tiny("tiny_llava")
    span = Span("B", ("left", " side", noise_image(0), "right", " side"))
    runs = adapter.runs(span)
    assert [type(r).__name__ for r in runs] == ["str", "Image", "str"] and runs[0] == "left side"
