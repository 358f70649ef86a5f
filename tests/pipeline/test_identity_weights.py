"""Issue 19 item 2: a checkpoint's weights are in its job key, read once and then known from a cached digest
(or from the Hub's download metadata, which records each LFS file's sha256)."""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from pipeline_support import job_config
from transformers import Qwen2Config, Qwen2ForCausalLM

from kamera import job
from kamera.data import media
from kamera.items.selection import Selection
from kamera.job.store import digest

identity = importlib.import_module("kamera.job.identity")  # the module (kamera.job.identity is also its function)


def tiny_checkpoint(path: Path, seed: int) -> Path:
    """A save_pretrained checkpoint of a 1-layer Qwen2 with random weights: the same shapes for every seed."""
    torch.manual_seed(seed)
    config = Qwen2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=64, max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def job_key(tmp_path: Path, ckpt: Path) -> str:
    cfg = job_config(tmp_path, "model=qwen2_5_vl_7b", f"model.path={ckpt}", "arms=[blind]", "n_items=1")
    return digest(job.identity(cfg, Selection([])))


@pytest.fixture
def reads(monkeypatch):
    """The files whose bytes were hashed whole (weights and media digests)."""
    seen: list[Path] = []
    real = media.sha256_file

    def counting(path: Path) -> str:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(media, "sha256_file", counting)
    return seen


def weights_read(seen: list[Path]) -> list[str]:
    return [p.name for p in seen if p.suffix == ".safetensors"]


def test_checkpoints_differing_only_in_weights_get_different_keys(tmp_path, reads):
    a, b = tiny_checkpoint(tmp_path / "A", 0), tiny_checkpoint(tmp_path / "B", 1)
    assert identity.safetensors_header(a / "model.safetensors") == identity.safetensors_header(b / "model.safetensors")
    key_a, key_b = job_key(tmp_path, a), job_key(tmp_path, b)
    assert key_a != key_b
    assert weights_read(reads) == ["model.safetensors", "model.safetensors"]
    reads.clear()
    assert job_key(tmp_path, a) == key_a  # unchanged: the same key, from the cached digest
    assert weights_read(reads) == []
    assert (a / ".cache" / "kamera").is_dir()  # cached beside the checkpoint
    copy = shutil.copytree(a, tmp_path / "copy of A")
    assert job_key(tmp_path, copy) == key_a  # a byte-identical copy shares the key (its digest is computed anew)
    assert weights_read(reads) == ["model.safetensors"]


def test_weights_rewritten_in_place_get_a_new_key(tmp_path, reads):
    a = tiny_checkpoint(tmp_path / "A", 0)
    first = job_key(tmp_path, a)
    tiny_checkpoint(tmp_path / "fresh", 1)
    os.replace(tmp_path / "fresh" / "model.safetensors", a / "model.safetensors")  # a second fine-tune step
    assert job_key(tmp_path, a) != first


def test_hub_download_metadata_gives_the_sha256_without_reading(tmp_path, reads):
    a = tiny_checkpoint(tmp_path / "A", 0)
    plain = job_key(tmp_path, tiny_checkpoint(tmp_path / "plain copy", 0))
    weights = a / "model.safetensors"
    sha = hashlib.sha256(weights.read_bytes()).hexdigest()
    meta = a / ".cache" / "huggingface" / "download" / "model.safetensors.metadata"
    meta.parent.mkdir(parents=True)
    meta.write_text(f"{'c' * 40}\n{sha}\n{time.time() + 5}\n")  # commit, etag (an LFS file's sha256), timestamp
    reads.clear()
    assert job_key(tmp_path, a) == plain  # the Hub's sha256 is the digest a read would give
    assert weights_read(reads) == []
    meta.write_text(f"{'c' * 40}\n{sha}\n{weights.stat().st_mtime - 60}\n")  # the file changed after the download
    job_key(tmp_path, a)
    assert weights_read(reads) == ["model.safetensors"]


def test_read_only_checkpoint_caches_its_digest_in_the_cache_dir(tmp_path, reads, monkeypatch):
    monkeypatch.setenv("KAMERA_CACHE", str(tmp_path / "cache"))
    a = tiny_checkpoint(tmp_path / "A", 0)
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == a else access(p, mode))
    key = job_key(tmp_path, a)
    assert not (a / ".cache").exists() and any((tmp_path / "cache").rglob("*.json"))
    reads.clear()
    assert job_key(tmp_path, a) == key and weights_read(reads) == []


def test_rehash_recomputes_the_cached_digests(tmp_path, reads, capsys):
    a = tiny_checkpoint(tmp_path / "A", 0)
    key = job_key(tmp_path, a)
    reads.clear()
    assert identity.main(["--rehash", str(a)]) == 0
    assert weights_read(reads) == ["model.safetensors"] and "model.safetensors" in capsys.readouterr().out
    assert job_key(tmp_path, a) == key


def test_toy_and_tiny_models_keep_their_fingerprints(tmp_path):
    fingerprints = {m: job.checkpoint_fingerprint(job_config(tmp_path, f"model={m}"))
                    for m in ("toy_binding", "tiny_qwen2_5_vl", "tiny_kimi")}
    assert fingerprints == {"toy_binding": "toy:9224fc92f119", "tiny_qwen2_5_vl": "tiny:154baace5425",
                            "tiny_kimi": "tiny:c6b5ade78029"}
