"""A splice that cannot be served is served as no reuse at all, byte for byte, on both sides of the connector.

Each forced load failure (:mod:`kamera.engine.fallback`: missing, corrupt, truncated, of other weights; on the
canonical page or on the patch of a rank-8 splice) must give the greedy token and every next-token log-prob of the
same prompt in an engine built **without** the connector, bit for bit, and name its cause. The worker-side case
corrupts the page after the scheduler checked it, so the worker's own load fails and vLLM recomputes the request
(``kv_load_failure_policy="recompute"``). The healthy splice differs from that output, so equality is not trivial.
"""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import pytest

from kamera.engine.fallback import CAUSES, broken_copy, cases, identical
from kamera.engine.store import StoreError, model_id

pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
pytestmark = pytest.mark.engine


def prompt(item):
    return item["prefix"] + item["A"] + item["B"] + item["query"]


@pytest.fixture(scope="module")
def plain(engine, item):
    """The prompt's output from the same engine built without the connector (closed before the connector's starts)."""
    return engine("float32", connector=False).run(prompt(item))


@pytest.fixture(scope="module")
def stored(plain, engine, item):
    """The connector's session with the full prefill ('full'), the canonical [prefix · B] page ('canon') and B's
    patch ('patch') stored, and the segments of a rank-8 splice of B (``key`` / ``patch`` overridable)."""
    from kamera.core import Patch, deficit, relocate
    from kamera.engine.store import save_patch

    s = engine("float32")
    p, pa = len(item["prefix"]), len(item["prefix"]) + len(item["A"])
    n = len(item["B"])
    s.run(prompt(item), {"capture": "full"})
    s.run(item["prefix"] + item["B"], {"capture": "canon"})
    full, canon = s.page("full")[0], s.page("canon")[0]
    save_patch(s.store, "patch", Patch.form(deficit(full.slice(pa, pa + n), relocate(canon.slice(p, p + n), pa - p)),
                                            dtype=full.dtype), s.model)

    def segs(key: str = "canon", patch: str = "patch") -> list[dict]:
        return [{"key": "full", "span": [0, pa]},
                {"key": key, "span": [p, p + n], "start": pa, "patch": patch, "rank": 8}]

    return s, segs


def test_the_connector_without_a_splice_is_the_engine_without_it(plain, stored, item):
    s, segs = stored
    assert identical(s.run(prompt(item)), plain)
    healthy = s.run(prompt(item), {"segments": segs()})
    assert healthy.fallback is None and healthy.num_cached_tokens == sum(b - a for a, b in (x["span"] for x in segs()))
    assert not identical(healthy, plain)  # the splice is approximate: byte equality below is not trivial


@pytest.mark.parametrize(("entry", "failure"), cases())
def test_a_failed_load_is_served_as_no_reuse_byte_for_byte(plain, stored, item, entry, failure):
    s, segs = stored
    broken = broken_copy(s.store, "canon" if entry == "page" else "patch", failure, f"{entry}-{failure[:5]}")
    plan = segs(key=broken) if entry == "page" else segs(patch=broken)
    out = s.run(prompt(item), {"segments": plan}, fallback_ok=True)
    assert identical(out, plain)
    assert out.fallback is not None and re.search(CAUSES[failure], out.fallback), out.fallback
    assert out.num_cached_tokens == 0
    with pytest.raises(StoreError, match=CAUSES[failure]):  # without fallback_ok: refused before anything runs
        s.run(prompt(item), {"segments": plan})


def test_a_page_corrupted_after_the_scheduler_checked_it_is_recomputed_on_the_worker(plain, stored, item,
                                                                                     monkeypatch):
    from kamera.engine.fallback import FAILURES
    from kamera.engine.vllm import KameraConnector

    s, segs = stored
    broken = "canon-late"
    shutil.copyfile(s.store / "canon.safetensors", s.store / f"{broken}.safetensors")
    checked = KameraConnector.get_num_new_matched_tokens

    def check_then_corrupt(self, request, num_computed_tokens):
        got = checked(self, request, num_computed_tokens)
        FAILURES["corrupt"](s.store / f"{broken}.safetensors")
        return got

    monkeypatch.setattr(KameraConnector, "get_num_new_matched_tokens", check_then_corrupt)
    out = s.run(prompt(item), {"segments": segs(key=broken)}, fallback_ok=True)
    monkeypatch.undo()
    assert identical(out, plain)
    assert out.fallback is not None and re.search(CAUSES["corrupt"], out.fallback), out.fallback
    assert [r.get("side") for r in s.timings() if r.get("fallback") == out.fallback][-1:] == ["worker"]
    assert identical(s.run(prompt(item), {"segments": segs()}), s.run(prompt(item), {"segments": segs()}))


def test_the_model_id_follows_the_weights_at_one_path(checkpoint, tmp_path):
    """A checkpoint replaced in place (one weight byte changed) is other weights: its pages are not this model's."""
    copy = shutil.copytree(checkpoint, tmp_path / "ckpt")
    before = model_id(copy, "float32")
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    after = model_id(copy, "float32")
    assert before != after and before.rsplit("::", 1)[0] == after.rsplit("::", 1)[0]


def test_a_step_without_attention_metadata_recomputes_its_splice(tmp_path, monkeypatch):
    """vLLM 0.34 calls start_load_kv outside the forward in FULL CUDA-graph mode (attn_metadata None): a splice
    that cannot be written is reported for recompute, never silently skipped; a capture alone is no failure."""
    import torch

    from kamera.engine.plan import Segment
    from kamera.engine.store import RECORDS
    from kamera.engine.vllm import NO_METADATA, KameraConnector, KameraMetadata, _Work

    def work(req_id, segments):
        return _Work(req_id, [1] * 40, [3, 4, 5], segments, "cap", "t", torch.arange(40), [])

    c = KameraConnector.__new__(KameraConnector)
    c.store, c.block_size, c._failed, c._captured, c._load_errors = tmp_path, 16, set(), {}, set()
    meta = KameraMetadata([work("spliced", [Segment("p", 0, 20, 0)]), work("capture", [])])
    monkeypatch.setattr(c, "_get_connector_metadata", lambda: meta)
    c.start_load_kv(SimpleNamespace(attn_metadata=None))
    assert c.get_block_ids_with_load_errors() == {3, 4} and c._failed == {"spliced"}
    (record,) = [json.loads(line) for line in (tmp_path / RECORDS).read_text().splitlines()]
    assert record["request"] == "spliced" and record["fallback"] == NO_METADATA and record["side"] == "worker"
