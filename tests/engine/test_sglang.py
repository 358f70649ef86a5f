"""SGLang 0.5.23 with kamera's radix cache (kamera/engine/sglang_radix.py), through a stock SGLang server on CPU.

The session (kamera/engine/sglang_server.py) is an HTTP client, so these tests run in kamera's venv against the server
of the SGLang side venv (SGLANG_PYTHON, else ~/.cache/kamera/venv-sglang/bin/python: make sglang-venv), and skip
with one reason without it. The pool tests run a snippet in that venv on SGLang's own pool classes. A mutation of the
backend reaches the server's processes through a ``sitecustomize`` module on their PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kamera.engine.family import EngineError
from kamera.engine.sglang_server import SGLANG_PYTHON, SGLangSession

REPO = Path(__file__).resolve().parents[2]
PYTHON = Path(os.environ.get("SGLANG_PYTHON") or SGLANG_PYTHON)
SGLANG = "0.5.23"


def sglang_version() -> str | None:
    if not PYTHON.is_file():
        return None
    probe = subprocess.run([str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() if probe.returncode == 0 else None


needs_sglang = pytest.mark.skipif(sglang_version() != SGLANG,
                                  reason=f"no SGLang {SGLANG} side venv at {PYTHON}: make sglang-venv, or set "
                                         "SGLANG_PYTHON")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from kamera.engine.checkpoint import tiny_qwen2

    return tiny_qwen2(tmp_path_factory.mktemp("sglang-ckpt"))


def session_with(monkeypatch, tmp_path: Path, checkpoint: Path, mutation: str | None = None) -> SGLangSession:
    """A live session on the tiny Qwen2; ``mutation``: Python run first in every server process (sitecustomize)."""
    if mutation is not None:
        (tmp_path / "mutation").mkdir()
        (tmp_path / "mutation" / "sitecustomize.py").write_text(textwrap.dedent(mutation))
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mutation"))
    return SGLangSession(checkpoint, tmp_path / "store", python=PYTHON, max_model_len=512)


def failed(session) -> list[str]:
    from kamera.engine.verify import checks

    return [c.name for c in checks(session) if not c.ok]


@pytest.mark.engine
@needs_sglang
def test_the_engine_identities_hold_through_stock_sglang_and_a_plain_request_shares_nothing(
    monkeypatch, tmp_path, checkpoint
):
    """kamera.engine.verify's checks (round trip, relocation = SGLang's own prefill at the new position, full rank =
    re-prefill, rank 0 = blind, every forced load failure = no reuse byte for byte) through the server; then a plain
    request after a blind splice of its own tokens is SGLang's full prefill again (cached 0, the same log-probs): a
    splice's approximate KV is never matched by another request; listed chunks are found where the prompt holds them;
    hostile requests are refused or fall back without taking the server down."""
    from kamera.engine.verify import Spliced
    from kamera.metrics import kl

    s = session_with(monkeypatch, tmp_path, checkpoint)
    try:
        assert failed(s) == []
        pr = Spliced(s, seed=3)
        plain = pr.run(None)
        exact = pr.run({"segments": [{"key": "full", "span": [0, pr.pb]}]})
        blind = pr.run({"segments": pr.segments()})  # the same tokens, B's relocated canonical page
        again = pr.run(None)
        assert (plain.num_cached_tokens, again.num_cached_tokens) == (0, 0)
        assert again.token == plain.token and torch.equal(again.logprobs, plain.logprobs)
        # the second splice of those tokens is served its own KV, not the first's (each splice its own namespace)
        assert kl(exact.logprobs.float(), blind.logprobs.float()) > 1e-4
        # position-free: chunks captured alone at position 0, listed in any order, are found where the prompt holds
        # them and served exactly as the segments that name their places
        a, b, q = pr.item["A"], pr.item["B"], pr.item["query"]
        s.run(a, {"capture": "alone-A"})
        s.run(b, {"capture": "alone-B"})
        found = s.run(a + b + q, {"chunks": ["alone-B", "alone-A"]})
        named = s.run(a + b + q, {"segments": [{"key": "alone-A", "span": [0, len(a)]},
                                               {"key": "alone-B", "span": [0, len(b)], "start": len(a)}]})
        assert found.num_cached_tokens == len(a) + len(b)
        assert found.token == named.token and torch.equal(found.logprobs, named.logprobs)
        # hostile requests: a plan that is not JSON is a full prefill with its cause recorded; a capture key that is
        # not a store name is refused in one line; neither takes the server down
        out = s._post({"input_ids": pr.prompt, "rid": "bad-json", "sampling_params": {
            "max_new_tokens": 1, "temperature": 0.0, "custom_params": {"kamera": "{oops"}}})
        assert out["meta_info"]["cached_tokens"] == 0
        assert next(r["fallback"] for r in s.timings() if r.get("request") == "bad-json").startswith("JSONDecodeError")
        with pytest.raises(EngineError, match=r"capture '\.\./x': the backend stored no page: store key '\.\./x'"):
            s.run(pr.prompt, {"capture": "../x"})
        assert torch.equal(pr.run(None).logprobs, plain.logprobs)
    finally:
        s.close()


UNROTATED = """
    from kamera.core import ChunkKV
    import kamera.engine.plan as plan
    plan.relocate = lambda chunk, delta: ChunkKV(chunk.specs, chunk.layers, chunk.positions + delta)
"""
# a backend that serves what it can: a segment whose patch does not load is served without it (blind), not refused
PARTIAL = """
    import dataclasses
    import kamera.engine.plan as plan
    from kamera.engine.store import StoreError
    check, compose = plan.check_plan, plan.compose
    def loaded(segs, store, model, specs):
        out = []
        for s in segs:
            try:
                s.patch is None or plan.load_patch(store, s.patch, model, specs)
            except StoreError:
                s = dataclasses.replace(s, patch=None)
            out.append(s)
        return out
    plan.check_plan = lambda segs, prompt, store, model, specs, *a: check(loaded(segs, store, model, specs), prompt,
                                                                            store, model, specs, *a)
    plan.compose = lambda segs, store, model, specs, *a: compose(loaded(segs, store, model, specs), store, model,
                                                                 specs, *a)
"""


# a backend whose splices share one namespace: the next splice of the same tokens is served the last one's KV
SHARED = """
    from array import array
    try:
        import kamera.engine.sglang_radix as radix
    except ImportError:  # a process that is not SGLang's
        radix = None
    if radix is not None:
        radix.KameraRadixCache._key = lambda self, req, tokens: radix.RadixKey(array("q", tokens), req.extra_key)
"""


@pytest.mark.engine
@needs_sglang
@pytest.mark.parametrize(("mutation", "caught"), [
    (UNROTATED, {"relocation at layer 0 (rel. error)"}),
    (SHARED, {"blind is served its own KV (rel. distance to re-prefill's, layers ≥ 1)"}),
    (PARTIAL, {f"fallback, {f} patch = no reuse (bit for bit)" for f in ("missing", "corrupt", "truncated",
                                                                          "other weights")}),
], ids=["no-rotation", "shared-namespace", "partial-reuse"])
def test_the_checks_fail_on_a_backend_that_does_not_rotate_or_serves_a_partial_reuse(
    monkeypatch, tmp_path, checkpoint, mutation, caught
):
    s = session_with(monkeypatch, tmp_path, checkpoint, mutation)
    try:
        assert caught <= set(failed(s))
    finally:
        s.close()


POOLS = """
import torch
from types import SimpleNamespace
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from kamera.core import ChannelSpec, ChunkKV, RotarySpec
from kamera.engine.family import EngineError
from kamera.engine.sglang_radix import check_pool, factory, plan_of, read_rows, register, write_rows
from kamera.engine.store import gqa_specs

def refused(f, *a):
    try:
        f(*a)
    except EngineError as e:
        return str(e)
    raise AssertionError(f"{f.__name__} accepted {a}")

slots = torch.tensor([5, 9, 2, 33])
gqa = gqa_specs(2, 64, RotarySpec("half", torch.ones(32), 64))
mla = (ChannelSpec("c_kv", 1, 512), ChannelSpec("k_pe", 1, 64, RotarySpec("interleaved", torch.ones(32), 64)))
pools = {"gqa": (MHATokenToKVPool(64, 1, torch.float32, 2, 64, 3, "cpu", False), gqa),
         "mla": (MLATokenToKVPool(64, 1, torch.float32, 512, 64, 3, "cpu", False), mla)}
for name, (pool, specs) in pools.items():
    check_pool(pool, specs)
    page = ChunkKV(specs, [tuple(torch.randn(4, s.heads, s.dim) for s in specs) for _ in range(3)], torch.arange(4))
    write_rows(pool, specs, slots, page)
    back = read_rows(pool, specs, slots)
    assert all(torch.equal(a, b) for got, want in zip(back, page.layers) for a, b in zip(got, want)), name
    for l, (a, b) in enumerate(page.layers):  # the layout SGLang's own attention reads
        if name == "gqa":
            assert torch.equal(pool.get_key_buffer(l)[slots], a) and torch.equal(pool.get_value_buffer(l)[slots], b)
        else:
            assert torch.equal(pool.get_value_buffer(l)[slots], a), "the latent first"
            assert torch.equal(pool.get_key_buffer(l)[slots], torch.cat([a, b], -1))
    short = ChunkKV(specs, page.layers[:2], page.positions)
    assert "2 layers, the engine 3" in refused(write_rows, pool, specs, slots, short)
print("pools ok")
assert "rows of" in refused(check_pool, pools["gqa"][0], mla)
assert "rows of" in refused(check_pool, pools["mla"][0], gqa)
assert "rows of" in refused(check_pool, pools["gqa"][0], gqa_specs(4, 64, gqa[0].rotary))
assert plan_of(None) == {} and plan_of(SimpleNamespace(sampling_params=SimpleNamespace(custom_params=None))) == {}
req = lambda raw: SimpleNamespace(sampling_params=SimpleNamespace(custom_params={"kamera": raw}))
assert plan_of(req('{"capture": "x"}')) == {"capture": "x"}
assert "JSON object" in refused(plan_of, req("[1, 2]"))
import os
import sys
os.environ.pop("KAMERA_STORE", None)
assert "needs $KAMERA_STORE" in refused(factory, SimpleNamespace())
os.environ["KAMERA_STORE"] = "/tmp"
hybrid = SimpleNamespace(is_hybrid_swa=True, is_hybrid_ssm=False, enable_hierarchical_cache=True)
assert "['is_hybrid_swa', 'enable_hierarchical_cache']" in refused(factory, hybrid)
register(); register()
from sglang.srt.mem_cache.registry import registered_radix_cache_backends
assert registered_radix_cache_backends().count("kamera") == 1
print("refusals ok")
"""


@pytest.mark.engine
@needs_sglang
def test_the_backend_reads_and_writes_sglangs_own_gqa_and_mla_pools_and_refuses_what_it_cannot_serve():
    """On SGLang's real MHATokenToKVPool and MLATokenToKVPool (CPU): rows written come back bit for bit and sit where
    SGLang's attention reads them (MLA: [latent · k_pe]); a pool of other widths, a chunk of other depth, a plan that
    is not an object, a missing store and a hybrid / hierarchical cache are refused in one line; registering twice
    registers once."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(PYTHON), "-c", POOLS], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pools ok" in done.stdout and "refusals ok" in done.stdout


def test_a_session_without_the_sglang_venv_or_with_media_is_refused_before_a_server_starts(tmp_path, checkpoint):
    with pytest.raises(EngineError, match=r"no SGLang venv at .*nowhere/python: make sglang-venv"):
        SGLangSession(checkpoint, tmp_path / "store", python=tmp_path / "nowhere" / "python")
    from kamera.models import tiny

    vl = tmp_path / "vl"
    tiny.qwen25_config().save_pretrained(vl)  # the session reads the config alone before it starts a server
    with pytest.raises(EngineError, match="qwen2_5_vl: the SGLang backend serves text decoders"):
        SGLangSession(vl, tmp_path / "store", python=tmp_path / "nowhere" / "python")


def test_a_server_that_exits_is_reported_with_its_last_log_line(tmp_path, checkpoint):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named sglang' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(EngineError, match=r"exited \(3\): ModuleNotFoundError: No module named sglang \(log: "):
        SGLangSession(checkpoint, tmp_path / "store", python=fake)


CLIENT = """
import sys, time
from pathlib import Path
from kamera.engine.sglang_server import SGLangSession
s = SGLangSession(sys.argv[1], Path(sys.argv[2]), python=sys.argv[3])
print(s._proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.engine
@needs_sglang
def test_a_client_killed_with_sigkill_takes_its_sglang_server_down(tmp_path, checkpoint):
    """``kill -9`` of the process that started a session leaves no server behind (PR_SET_PDEATHSIG)."""
    import signal
    import time

    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(checkpoint), str(tmp_path / "store"), str(PYTHON)],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    server = int(client.stdout.readline())
    client.send_signal(signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{server}").exists():
        time.sleep(0.5)
    assert not Path(f"/proc/{server}").exists(), f"the SGLang server {server} outlived its client"
