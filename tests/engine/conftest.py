"""Engine fixtures: the tiny checkpoints (Qwen2: GQA, DeepSeek-V2: MLA) and one live vLLM engine at a time
(skipped without vLLM). Every engine test runs once per family; pytest groups them by checkpoint."""

from __future__ import annotations

import pytest
import torch

SIZES = {"prefix": 5, "A": 40, "B": 50, "query": 7}  # the claim (95 tokens) is not a multiple of the block size


@pytest.fixture(scope="session", params=["qwen2", "deepseek_v2"])
def checkpoint(request, tmp_path_factory):
    from kamera.engine.checkpoint import CHECKPOINTS

    return CHECKPOINTS[request.param](tmp_path_factory.mktemp(f"engine-ckpt-{request.param}"))


@pytest.fixture(scope="module")
def engine(checkpoint, tmp_path_factory):
    """engine(dtype) → a live EngineSession on the tiny checkpoint (one at a time: switching dtype closes the other;
    closed at the end of its module, so the next module's engine is the only one in the process); ``fresh=True``
    closes a live one of that dtype too and builds another (a session made under a monkeypatched probe);
    ``connector=False``, the same engine without the kamera connector (the reference of a fallback)."""
    pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
    from kamera.engine.vllm import EngineSession

    live: dict = {}

    def get(dtype: str, fresh: bool = False, connector: bool = True):
        key = (dtype, connector)
        if fresh and key in live:
            live.pop(key).close()
        if key not in live:
            for other in list(live):
                live.pop(other).close()
            live[key] = EngineSession(
                checkpoint, tmp_path_factory.mktemp(f"store-{checkpoint.name}-{dtype}"), dtype=dtype, max_model_len=512,
                connector=connector,
            )
        return live[key]

    yield get
    for s in live.values():
        s.close()


@pytest.fixture(scope="session")
def item() -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(1)
    return {role: torch.randint(16, 500, (n,), generator=g).tolist() for role, n in SIZES.items()}
