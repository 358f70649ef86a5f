"""A byte-level tokenizer for the tiny random models (no vocabulary files to download).

Ids 0-2 are pad / bos / eos, each UTF-8 byte b is id b + 3, and ids from 259 up are free for a
family's special tokens (image pads, vision start/end). Paper-scale models use their own tokenizer.
"""

from __future__ import annotations

OFFSET = 3
FIRST_FREE = 256 + OFFSET


class ByteTokenizer:
    """The minimal tokenizer interface the adapters use: encode, decode, eos."""

    pad_token_id = 0
    bos_token_id = 1
    eos_token_id = 2

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = [b + OFFSET for b in text.encode("utf-8")]
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        data = bytes(i - OFFSET for i in ids if OFFSET <= i < FIRST_FREE)
        return data.decode("utf-8", errors="replace")
