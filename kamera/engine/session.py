"""What every engine session shares (vLLM's :class:`~kamera.engine.vllm.EngineSession`, SGLang's
:class:`~kamera.engine.sglang_server.SGLangSession`): the served checkpoint's config and channels, the page store and
its model id, and one request's :class:`Output`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from kamera.core import ChunkKV
from kamera.engine.family import channels
from kamera.engine.store import load_page, model_id, records


@dataclass
class Output:
    """Next-token log-probs over the whole vocabulary (float64), the greedy token the engine sampled, how many prompt
    tokens it reports cached, and why a splice fell back to the engine's own prefill, if it did."""

    logprobs: torch.Tensor
    num_cached_tokens: int
    seconds: float
    fallback: str | None = None
    token: int | None = None


class StoreSession:
    """An engine session's model and store: ``config`` (the checkpoint's), ``specs`` (its two cached channels,
    :func:`kamera.engine.family.channels`, which refuses a family no engine here serves), ``store`` (the page store
    folder, created), ``model`` (the store's model id: checkpoint, dtype, weights digest), ``vocab``."""

    def __init__(self, model: str | Path, store: str | Path, dtype: str, max_model_len: int) -> None:
        from transformers import AutoConfig

        self.path = str(Path(model).resolve())
        self.config = AutoConfig.from_pretrained(self.path)
        self.specs = channels(self.config)
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        self.dtype = dtype
        self.model = model_id(self.path, dtype)
        self.max_model_len = max_model_len
        self.vocab = int(getattr(self.config, "text_config", self.config).vocab_size)

    def page(self, key: str) -> tuple[ChunkKV, torch.Tensor]:
        """A stored page and its token ids."""
        return load_page(self.store, key, self.model, self.specs)

    def timings(self) -> list[dict]:
        """The engine's per-splice records so far (timings, fallbacks)."""
        return records(self.store)
