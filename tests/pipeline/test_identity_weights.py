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
from kamera.provenance import digest

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


def hub_download(ckpt: Path, name: str = "model.safetensors") -> str:
    """What ``hf download --local-dir ckpt`` leaves beside ``name``: its record (commit, etag = the LFS file's
    sha256, timestamp); the sha256 recorded."""
    sha = hashlib.sha256((ckpt / name).read_bytes()).hexdigest()
    meta = ckpt / ".cache" / "huggingface" / "download" / f"{name}.metadata"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(f"{'c' * 40}\n{sha}\n{time.time() + 5}\n")
    return sha


def test_the_hub_record_is_checked_against_the_bytes_once_then_stat_only(tmp_path, reads):
    a = tiny_checkpoint(tmp_path / "A", 0)
    plain = job_key(tmp_path, tiny_checkpoint(tmp_path / "plain copy", 0))
    hub_download(a)
    reads.clear()
    assert job_key(tmp_path, a) == plain  # the Hub's sha256 is the digest the bytes give
    assert weights_read(reads) == ["model.safetensors"]  # read once: the record is a hint to verify
    reads.clear()
    assert job_key(tmp_path, a) == plain and weights_read(reads) == []  # then tied to the file's stat


def _cp_p(src: Path, dst: Path) -> None:  # cp -p: written in place (same inode), the source's mtime kept
    shutil.copy2(src, dst)


def _rsync_t(src: Path, dst: Path) -> None:  # rsync -t (and an untarred fine-tune): a new file, mtime kept
    tmp = dst.with_name(f".{dst.name}.part")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


@pytest.mark.parametrize("put", [_cp_p, shutil.move, _rsync_t], ids=["cp -p", "mv", "rsync -t"])
def test_weights_put_under_a_hub_record_are_identified_by_their_bytes(tmp_path, put, caplog):
    """Issue 29 item 1: weights swapped under the Hub's download record (their mtime older than the record) got the
    old weights' digest, so the job was "complete: nothing to run" with the old weights' rows."""
    a, b = tiny_checkpoint(tmp_path / "A", 0), tiny_checkpoint(tmp_path / "B", 1)
    hub_download(a)
    key_a, key_b = job_key(tmp_path, a), job_key(tmp_path, b)
    time.sleep(0.02)  # past the file system's timestamp tick
    put(b / "model.safetensors", a / "model.safetensors")
    assert job_key(tmp_path, a) == key_b != key_a
    assert "differs from the Hub's record" in caplog.text


def test_a_rewrite_that_restores_size_inode_and_mtime_is_read_again(tmp_path, reads):
    """The record is tied to the file's ctime too, which no tool restores: a rewrite in place that puts the
    mtime back (same size, same inode) is read again."""
    a, b = tiny_checkpoint(tmp_path / "A", 0), tiny_checkpoint(tmp_path / "B", 1)
    weights, key_b = a / "model.safetensors", job_key(tmp_path, b)
    key_a, st = job_key(tmp_path, a), weights.stat()
    time.sleep(0.02)
    with open(weights, "r+b") as fh:  # in place: the inode stays
        fh.write((b / "model.safetensors").read_bytes())
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (weights.stat().st_ino, weights.stat().st_size, weights.stat().st_mtime_ns) == \
        (st.st_ino, st.st_size, st.st_mtime_ns)
    assert job_key(tmp_path, a) == key_b != key_a


def test_rehash_changes_what_the_next_job_uses_and_a_hub_mismatch_is_an_error(tmp_path, capsys):
    a, b = tiny_checkpoint(tmp_path / "A", 0), tiny_checkpoint(tmp_path / "B", 1)
    hub_download(a)
    key_b = job_key(tmp_path, b)
    _cp_p(b / "model.safetensors", a / "model.safetensors")
    capsys.readouterr()
    assert identity.main(["--rehash", str(a)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.safetensors" in err[0] and "differs from the Hub's record" in err[0], err
    assert job_key(tmp_path, a) == key_b


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
