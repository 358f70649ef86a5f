"""The README's notebook snippet runs as written (with two images supplied)."""

from __future__ import annotations

import re
from pathlib import Path

from tinyfamilies import noise_image

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_notebook_snippet_runs():
    block = re.search(r"## In a notebook\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope = {"image_a": noise_image(1), "image_b": noise_image(2)}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["kl16"] >= 0.0 and scope["patch"].effective_rank == 16


def test_readme_fetches_checkpoints_with_hf_download():
    """Current huggingface_hub ships ``hf download``; the deprecated ``huggingface-cli`` is not what we tell users."""
    text = README.read_text()
    assert "hf download Qwen/Qwen2.5-VL-7B-Instruct" in text and "huggingface-cli" not in text
