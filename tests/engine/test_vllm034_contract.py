"""The connector's contract on vLLM 0.34's own objects, in the side venv of scripts/vllm034_venv.sh (make vllm034-venv).

vLLM 0.34 has no CPU build, so no 0.34 engine runs here (its x86 CPU platform needs triton-cpu,
vllm/platforms/cpu.py:242); its scheduler-side classes import all the same. Each test runs one snippet in that venv's
python (VLLM034_PYTHON, else ~/.cache/kamera/venv-vllm034/bin/python) with PYTHONPATH at this checkout, so it is this
checkout's kamera on 0.34's KVConnectorBase_V1, Request, SchedulerOutput / NewRequestData and MultiModalFeatureSpec /
PlaceholderRange. Not exercised on 0.34: the worker side (start_load_kv, save_kv_layer on a live paged cache)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[2]
PYTHON = Path(os.environ.get("VLLM034_PYTHON") or Path.home() / ".cache/kamera/venv-vllm034/bin/python")
VLLM = "0.34.0"
MARK = "KAMERA-JSON "
# the seven methods 0.34's KVConnectorBase_V1 leaves abstract, all implemented by KameraConnector
ABSTRACT = [
    "build_connector_meta",
    "get_num_new_matched_tokens",
    "save_kv_layer",
    "start_load_kv",
    "update_state_after_alloc",
    "wait_for_layer_load",
    "wait_for_save",
]

# A scheduler-role KameraConnector through its own constructor: 0.34's KVTransferConfig and CacheConfig, a stand-in
# model_config (max_model_len, a tiny Qwen2 hf_config: a ModelConfig would load a checkpoint); kv_cache_config is
# None (the scheduler side never reads it). emit() prints the snippet's answer as one JSON line.
PRELUDE = """
import hashlib, json, tempfile
from types import SimpleNamespace

import numpy as np
import transformers as tf
from vllm import SamplingParams
from vllm.config import CacheConfig, KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorRole
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.v1.request import Request

import kamera
from kamera.engine.vllm import KameraConnector

hf = tf.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=4096)
kv_config = KVTransferConfig(kv_connector="KameraConnector", kv_role="kv_both",
                             kv_connector_extra_config={"store": tempfile.mkdtemp(), "model": "m"})
vllm_config = SimpleNamespace(kv_transfer_config=kv_config,
                              cache_config=CacheConfig(block_size=16, enable_prefix_caching=False),
                              model_config=SimpleNamespace(max_model_len=4096, hf_config=hf))
connector = KameraConnector(vllm_config, KVConnectorRole.SCHEDULER, None)
DIGEST = hashlib.sha256(b"one image").hexdigest()

def request(rid, n, params=None, features=()):
    extra = {"kv_transfer_params": params} if params else None
    sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=1, extra_args=extra)
    return Request(request_id=rid, prompt_token_ids=np.arange(n, dtype=np.int32), sampling_params=sp,
                   pooling_params=None, mm_features=list(features))

def emit(out):
    print("KAMERA-JSON " + json.dumps(dict(out, kamera=kamera.__file__)))
"""


@pytest.fixture(scope="module", autouse=True)
def vllm034():
    """Skip the module, with one reason, without the side venv or with another vLLM in it."""
    found = None
    if PYTHON.is_file():
        probe = subprocess.run(
            [str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = probe.stdout.strip() if probe.returncode == 0 else None
    if found != VLLM:
        pytest.skip(
            f"no vLLM {VLLM} side venv at {PYTHON} (found: {found or 'none'}): make vllm034-venv, or set VLLM034_PYTHON"
        )


def run034(snippet: str) -> dict:
    """The snippet's JSON answer, run after PRELUDE in the 0.34 venv on this checkout's kamera."""
    env = dict(os.environ, PYTHONPATH=str(REPO), VLLM_LOGGING_LEVEL="ERROR")
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [str(PYTHON), "-c", PRELUDE + textwrap.dedent(snippet)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, f"the 0.34 snippet failed:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert len(lines) == 1, done.stdout[-2000:]
    out = json.loads(lines[0][len(MARK) :])
    assert Path(out.pop("kamera")).resolve().is_relative_to(REPO), "the snippet imported another checkout's kamera"
    return out


def test_base_class_constructor_abstract_methods_and_hooks():
    out = run034(
        """
        import inspect
        r = request("r0", 8, {"kamera": {"capture": "k", "tag": "t"}})
        emit({
            "base_init": list(inspect.signature(KVConnectorBase_V1.__init__).parameters),
            "kamera_init": list(inspect.signature(KameraConnector.__init__).parameters),
            "abstract": sorted(KVConnectorBase_V1.__abstractmethods__),
            "own": sorted(n for n in KVConnectorBase_V1.__abstractmethods__ if n in vars(KameraConnector)),
            "left": sorted(KameraConnector.__abstractmethods__),
            "lookahead": KameraConnector.supports_lookahead_block_hashes(kv_config),
            "may_load_async": bool(connector.may_load_async(r)),
        })
        """
    )
    assert out["base_init"] == out["kamera_init"] == ["self", "vllm_config", "role", "kv_cache_config"]
    assert out["abstract"] == ABSTRACT and out["own"] == ABSTRACT
    assert out["left"] == []
    assert out["lookahead"] is False  # JSON keeps False apart from 0 / None
    assert not out["may_load_async"]


def test_scheduler_side_on_real_requests_and_scheduler_output():
    out = run034(
        """
        from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
        at = PlaceholderRange(3, 4)
        image = MultiModalFeatureSpec(data=None, modality="image", identifier=DIGEST, mm_position=at)
        capture = request("cap", 40, {"kamera": {"capture": "k", "tag": "t"}}, [image])
        plain = request("plain", 20)
        matched = [list(connector.get_num_new_matched_tokens(r, 0)) for r in (capture, plain)]
        so = SchedulerOutput.make_empty()
        before = so.has_sync_kv_loads
        so.scheduled_new_reqs = [NewRequestData.from_request(capture, ([0, 1, 2],), list(capture.prefill_token_ids)),
                                 NewRequestData.from_request(plain, ([3, 4],), list(plain.prefill_token_ids))]
        so.num_scheduled_tokens = {"cap": 40, "plain": 20}
        so.total_num_scheduled_tokens = 60
        meta = connector.build_connector_meta(so)
        emit({
            "matched": matched,
            "work": [{"req_id": w.req_id, "prompt": len(w.prompt), "block_ids": w.block_ids, "capture": w.capture,
                      "tag": w.tag, "segments": len(w.segments), "media": w.media, "positions": w.positions.tolist()}
                     for w in meta.work],
            "sync": [before, so.has_sync_kv_loads],
            "digest": DIGEST,
        })
        """
    )
    assert out["matched"] == [[0, False], [0, False]]
    media = [{"modality": "image", "digest": out["digest"], "offset": 3, "length": 4}]
    assert out["work"] == [
        {
            "req_id": "cap",
            "prompt": 40,
            "block_ids": [0, 1, 2],
            "capture": "k",
            "tag": "t",
            "segments": 0,
            "media": media,
            "positions": list(range(40)),
        }
    ]
    assert out["sync"] == [False, True]


def test_media_identity_with_is_embed():
    out = run034(
        """
        import torch
        from kamera.engine.plan import media_of
        def feature(offset, length, is_embed=None, name=b"image"):
            rng = PlaceholderRange(offset, length, is_embed=is_embed)
            return MultiModalFeatureSpec(data=None, modality="image", identifier=hashlib.sha256(name).hexdigest(),
                                         mm_position=rng)
        emit({
            "plain": media_of([feature(3, 4)]),
            "masked": media_of([feature(10, 5, torch.tensor([False, True, True, False, True]))]),
            "all_true": media_of([feature(10, 5, torch.ones(5, dtype=torch.bool))]),
            "digest": hashlib.sha256(b"image").hexdigest(),
        })
        """
    )
    d = out["digest"]
    assert out["plain"] == [{"modality": "image", "digest": d, "offset": 3, "length": 4}]
    assert out["all_true"] == [{"modality": "image", "digest": d, "offset": 10, "length": 5}]
    # the absolute [start, end) runs vLLM assigns embeddings to: 11-12 and 14
    runs = [[11, 13], [14, 15]]
    assert out["masked"] == [{"modality": "image", "digest": d, "offset": 10, "length": 5, "embeds": runs}]
