"""A stock SGLang server with kamera's radix cache, driven like :class:`kamera.engine.vllm.EngineSession`.

:class:`SGLangSession` starts ``python -m sglang.launch_server --radix-cache-backend kamera`` (the backend:
:mod:`kamera.engine.sglang_radix`) in the SGLang venv (``make sglang-venv``; a GPU node's own ``pip install
sglang``), sends one greedy step per request to its ``/generate`` endpoint with the kamera plan in
``custom_params``, and reads back the next-token log-probs over the whole vocabulary, the cached-token count SGLang
reports and any fallback the backend recorded. It imports nothing of SGLang, so it runs in kamera's own venv; the
checks of :mod:`kamera.engine.verify` take it as they take a vLLM session (``--engine sglang``).

Text decoders only (GQA / MHA with 1-D RoPE, DeepSeek-V2's MLA): SGLang places a text prompt at 0..n−1, and the
backend serves no media.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import torch

from kamera.engine.family import EngineError, attention, mrope
from kamera.engine.plan import PARAMS, check_plan, plan_segments
from kamera.engine.session import Output, StoreSession
from kamera.engine.store import StoreError, entry_path, records

SGLANG_PYTHON = Path.home() / ".cache/kamera/venv-sglang/bin/python"  # make sglang-venv
LOG = "sglang-server.log"  # the server's output, in the store folder
REQUEST_TIMEOUT = 300.0  # seconds one greedy step may take (a tiny twin's takes well under one)
CPU_ATTENTION = "torch_native"  # SGLang's attention backend on a CPU (--device cpu)
LIBRARIES = ("sglang", "torch", "transformers")  # an engine=sglang job's libraries, in the SGLang venv


def sglang_python() -> Path:
    """The SGLang venv's interpreter: ``$SGLANG_PYTHON``, else :data:`SGLANG_PYTHON`."""
    return Path(os.environ.get("SGLANG_PYTHON") or SGLANG_PYTHON)


def libraries(python: Path | None = None) -> dict[str, str]:
    """The versions of :data:`LIBRARIES` installed beside ``python`` (the SGLang venv's), by distribution name;
    EngineError when that interpreter is absent or has no SGLang."""
    python = python or sglang_python()
    if not python.is_file():
        raise EngineError(f"no SGLang venv at {python}: make sglang-venv, or set SGLANG_PYTHON")
    code = f"import importlib.metadata as m, json; print(json.dumps({{p: m.version(p) for p in {LIBRARIES!r}}}))"
    probe = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise EngineError(f"{python} has no {' / '.join(LIBRARIES)}: {probe.stderr.strip().splitlines()[-1:]}")
    return json.loads(probe.stdout)


def die_with_parent() -> None:
    """Run in the server's process before it starts: a session of its own (:meth:`SGLangSession.close` signals the
    whole group) and, on Linux, SIGTERM when the process that started it dies, ``kill -9`` included (``prctl``
    PR_SET_PDEATHSIG; SGLang's launcher then takes its scheduler and detokenizer down with it). The signal follows
    the starting *thread*: a session lives as long as the thread that made it."""
    os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_refusal(hf_config: Any) -> str | None:
    """Why SGLang with kamera's radix cache cannot serve this model on a CPU (None: it can): media, or MLA (the
    :class:`SGLangSession` docstring)."""
    if mrope(hf_config):
        return f"{hf_config.model_type}: the SGLang backend serves text decoders (1-D RoPE), no media"
    if attention(hf_config) == "MLA":
        return (f"{hf_config.model_type}: SGLang's CPU rotary embedding takes DeepSeek-YaRN scaling only "
                "(get_rope_cpu asserts rope_scaling): an MLA model is served by SGLang on a GPU")
    return None


class SGLangSession(StoreSession):
    """One SGLang server process on checkpoint ``model`` serving from the store folder ``store``.

    ``python``: the SGLang venv's interpreter (:func:`sglang_python`); ``device`` "cpu" runs SGLang's
    :data:`CPU_ATTENTION` (``--device cpu``), anything else is passed to ``--device`` with SGLang's default attention.
    An MLA model does not start on a CPU: SGLang's CPU rotary embedding takes DeepSeek-YaRN scaling only
    (``get_rope_cpu``, ``sglang/srt/layers/rotary_embedding/factory.py``, asserts ``rope_scaling``), and kamera's
    preflight refuses scaled RoPE, so it is refused here in one line; on a GPU it is served.
    ``backend=False`` starts the same server with SGLang's own radix cache instead of kamera's. The server's log is
    ``<store>/sglang-server.log``.
    """

    # SGLang's extend attention over a cached prefix is not its prefill's arithmetic: its own prefix reuse moves the
    # tiny Qwen2's next-token log-probs by 4.8e-7 (docs/engine.md), so a round trip holds to float32 rounding
    extend_bitwise = False

    def __init__(
        self,
        model: str | Path,
        store: str | Path,
        dtype: str = "float32",
        max_model_len: int = 2048,
        python: str | Path | None = None,
        device: str = "cpu",
        backend: bool = True,
        start_timeout: float = 600.0,
    ) -> None:
        super().__init__(model, store, dtype, max_model_len)
        refused = cpu_refusal(self.config) if device == "cpu" else None
        if refused:
            raise EngineError(refused)
        python = Path(python or sglang_python())
        if not python.is_file():
            raise EngineError(f"no SGLang venv at {python}: make sglang-venv, or set SGLANG_PYTHON")
        self.backend = backend
        self.port = free_port()
        cmd = [str(python), "-m", "sglang.launch_server", "--model-path", self.path, "--dtype", dtype,
               "--device", device, "--context-length", str(max_model_len), "--max-total-tokens", "8192",
               "--skip-tokenizer-init", "--random-seed", "0", "--port", str(self.port),
               "--nccl-port", str(free_port())]  # its process group's port too: two servers at once never share one
        if device == "cpu":
            cmd += ["--attention-backend", CPU_ATTENTION]
        if backend:
            cmd += ["--radix-cache-backend", "kamera"]
        env = {**os.environ, "KAMERA_STORE": str(self.store.resolve())}
        self._log = open(self.store / LOG, "ab")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      preexec_fn=die_with_parent)
        self._wait(start_timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._log.close()
                tail = (self.store / LOG).read_text(errors="replace").strip().splitlines()[-1:]
                raise EngineError(f"the SGLang server exited ({self._proc.returncode}): {tail[0] if tail else '-'} "
                                  f"(log: {self.store / LOG})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    return
            except OSError:
                time.sleep(1.0)
        self.close()
        raise EngineError(f"the SGLang server did not answer in {timeout:.0f} s (log: {self.store / LOG})")

    def expand(self, ids: list[int], images: list[Any]) -> list[int]:
        """``ids`` as they are: the SGLang backend serves text prompts only."""
        if images:
            raise EngineError("the SGLang backend serves text prompts only (no media)")
        return list(ids)

    def _post(self, body: dict) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as r:
                return json.load(r)
        except urllib.error.HTTPError as err:
            raise EngineError(f"SGLang refused the request ({err.code}): {err.read().decode()[:300]}") from None
        except OSError as err:  # a timeout or a dropped connection: the server hung or died
            alive = "running" if self._proc.poll() is None else f"exited ({self._proc.returncode})"
            raise EngineError(f"no answer from the SGLang server ({alive}): {err} (log: {self.store / LOG})") from None

    def run(
        self,
        prompt: list[int],
        kamera: dict | None = None,
        images: list[Any] | None = None,
        fallback_ok: bool = False,
        top: int | None = None,
    ) -> Output:
        """One greedy step on ``prompt`` with the kamera parameters ``kamera`` (capture and / or segments or
        chunks, :func:`kamera.engine.plan.plan_segments`), as
        :meth:`kamera.engine.vllm.EngineSession.run`: without ``fallback_ok`` a bad plan is refused here before it
        is sent; with it the backend alone decides, and a plan it cannot serve is SGLang's full prefill, its cause in
        :attr:`Output.fallback`."""
        self.expand(prompt, images or [])
        try:  # chunks are found in the store: a missing page is the backend's to report under fallback_ok
            segs = plan_segments({PARAMS: kamera} if kamera else None, prompt, self.store, self.model, self.specs)
        except (EngineError, StoreError):
            if not fallback_ok:
                raise
            segs = []
        if not fallback_ok:
            check_plan(segs, prompt, self.store, self.model, self.specs, self.max_model_len)
        rid = uuid.uuid4().hex
        sampling: dict[str, Any] = {"max_new_tokens": 1, "temperature": 0.0}
        if kamera:
            sampling["custom_params"] = {PARAMS: json.dumps(kamera)}
        body = {"input_ids": list(prompt), "sampling_params": sampling, "rid": rid, "return_logprob": True,
                "top_logprobs_num": self.vocab if top is None else top, "logprob_start_len": len(prompt) - 1}
        t0 = time.perf_counter()
        out = self._post(body)
        seconds = time.perf_counter() - t0
        info = out["meta_info"]
        lp = torch.full((self.vocab,), float("-inf"), dtype=torch.float64)
        for logprob, tok, _ in info["output_top_logprobs"][0]:
            lp[int(tok)] = logprob
        token = int(info["output_token_logprobs"][0][1])
        cached, claim = int(info.get("cached_tokens") or 0), sum(s.n for s in segs)
        mine = [r for r in records(self.store) if r.get("request") == rid]
        fallback = next((r["fallback"] for r in mine if "fallback" in r), None)
        if fallback is not None:
            if not fallback_ok:
                raise EngineError(f"the splice fell back to SGLang's prefill: {fallback}")
            return Output(lp, cached, seconds, fallback, token)
        if self.backend and cached != claim:  # SGLang's own radix cache (backend=False) may share any prefix
            raise EngineError(f"SGLang reports {cached} cached tokens, the splice claimed {claim}")
        failed = next((r["capture_failed"] for r in mine if "capture_failed" in r), None)
        if kamera and kamera.get("capture") and (failed or not entry_path(self.store, kamera["capture"]).is_file()):
            raise EngineError(f"capture {kamera['capture']!r}: the backend stored no page: {failed or '?'} "
                              f"(log: {self.store / LOG})")
        return Output(lp, cached, seconds, token=token)

    def close(self) -> None:
        """Stop the server (its whole process group: SGLang's scheduler and detokenizer run as children)."""
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if not self._log.closed:
            self._log.close()
