"""An agent job: one model × one window benchmark selection (the pools) × one trace kind × a list of policies.

The third item shape (:mod:`kamera.job.shapes` picks it when the job lists ``policies``): each selected window
item is a pool of chunks; the job's ``trace`` (conf/trace: a seeded generator ``web`` / ``video`` / ``doc`` and
its knobs, or ``trace.path``, a JSONL file of the user's own agent) gives each pool its sequence of windows, and
every policy replays it (:func:`kamera.agent.replay.replay`). The arm jobs' identity, preflight, resume,
completeness, failed-item and refusal semantics are unchanged:

    config      ``policies`` (conf/policy labels, the entry forms of ``arms``); ``arms``, ``probes`` and
                ``window_probes`` empty; ``trace`` (kind, knobs, ``path``, ``budget`` in chunk pages of the pool,
                ``eviction``, ``cost_model``: the paper model whose FLOPs price the forwards)
    identity    as a window job's, plus ``shape: agent`` and the trace spelled out (a JSONL trace by its content's
                sha256, not its path): another trace, budget or cost model is another job
    rows        one per (item, policy, step), the arm rows' columns plus ``shape = "agent"``, ``trace``, ``pool``
                and the replay's measures (:mod:`kamera.agent.replay`); the store's plugin column ``arm`` holds the
                policy's label, so (item, policy) pairs key, resume and count as (item, arm) pairs do
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import ClassVar

from omegaconf import DictConfig, OmegaConf

from kamera.agent.replay import replay
from kamera.agent.session import page_bytes_per_token
from kamera.agent.store import EVICTIONS
from kamera.agent.trace import GENERATORS, make_trace, read_jsonl
from kamera.errors import ItemError
from kamera.items.window import WindowEntry
from kamera.job.lists import unread_lists
from kamera.job.rows import row
from kamera.job.spec import Spec, build_specs
from kamera.models.base import Adapter
from kamera.models.flops import Forward, paper_model_flops
from kamera.window.benches import WindowBench
from kamera.window.context import WindowContext
from kamera.window.shape import ARM_COLUMNS, GIB, WindowItems

TRACE_KEYS = ("kind", "path", "knobs", "budget", "eviction", "cost_model")


def _plain(value: object) -> object:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def item_seed(item_id: str) -> int:
    """A pool's own trace seed (with the job's ``seed``), from its id: traces differ across pools, reproducibly."""
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16)


class AgentItems(WindowItems):
    """Window items as pools × policies replaying a trace over them."""

    name = "agent"
    order = 0  # asked first: a job listing policies is an agent job whatever its benchmark
    claim_key = "policies"
    claim_bench = None  # not the window shape's: a window job without policies stays a window job
    kinds = ("policy",)  # the plugin list the job reads: cfg.policies
    identity_tag: ClassVar[dict] = {"shape": "agent"}

    def __init__(self, bench: WindowBench | None, cfg: DictConfig) -> None:
        super().__init__(bench)  # type: ignore[arg-type]
        self.identity_tag = {"shape": "agent", "trace": self.trace_identity(cfg)}

    @classmethod
    def of(cls, cfg: DictConfig, bench: object) -> AgentItems:
        return cls(bench if isinstance(bench, WindowBench) else None, cfg)

    # ----- the trace ---------------------------------------------------------------------------------
    @staticmethod
    def trace(cfg: DictConfig) -> dict:
        t = _plain(cfg.get("trace"))
        return t if isinstance(t, dict) else {}

    def trace_identity(self, cfg: DictConfig) -> dict:
        """The trace as it defines the numbers: a generator's kind and knobs, or a JSONL file's content digest."""
        t = self.trace(cfg)
        out = {k: t.get(k) for k in ("budget", "eviction", "cost_model")}
        path = t.get("path")
        if path:
            p = Path(str(path)).expanduser()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            return {"kind": "jsonl", "sha256": digest, **out}
        return {"kind": t.get("kind"), "knobs": t.get("knobs"), **out}

    def pool_size(self, cfg: DictConfig) -> int | None:
        """Chunks in each pool, read off the benchmark's options where they fix it (None: known per item)."""
        try:
            o = self.options(cfg)
        except (ValueError, TypeError):
            return None
        if "segments" in o:
            return int(o["segments"]) + int(o.get("n_foreign", 0))
        if "n_history" in o and isinstance(o.get("window"), int):
            return int(o["n_history"] or 2 * o["window"] + 1) + int(o.get("n_foreign", 0))
        if self.bench.name == "window_toy":  # the toy task's streams are built from its spec, without weights
            from kamera.toy.model import WEIGHTS, read_spec
            from kamera.toy.window_task import window_item

            try:
                spec, entries = read_spec(WEIGHTS / "window")[1], self.select(cfg, 1).items
            except (ValueError, OSError):
                return None
            return min(
                len(window_item(spec, e.meta["kind"], 0, cfg.seed, e.meta["n_states"]).chunks)
                for e in entries
            )
        return None

    def trace_problems(self, cfg: DictConfig) -> list[str]:
        """The trace's keys, one line each; a JSONL trace is read and checked against the pool here."""
        t = self.trace(cfg)
        if not t:
            return [
                "trace=null: an agent job replays a trace: trace=web|video|doc (conf/trace) or trace.path=<file.jsonl>"
            ]
        p = [
            f"trace.{k}: unknown key; a trace has {list(TRACE_KEYS)}"
            for k in sorted(set(t) - set(TRACE_KEYS))
        ]
        budget, n = t.get("budget"), self.pool_size(cfg)
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0
        ):
            p.append(
                f"trace.budget={budget!r}: store capacity in chunk pages, a number > 0 (or null: unbounded)"
            )
        if t.get("eviction") not in EVICTIONS:
            p.append(f"trace.eviction={t.get('eviction')!r}: one of {list(EVICTIONS)}")
        if t.get("cost_model") is not None:
            try:
                paper_model_flops(str(t["cost_model"]))
            except (ValueError, KeyError) as err:
                p.append(f"trace.cost_model={t['cost_model']!r}: {str(err).splitlines()[0]}")
        if t.get("path"):
            try:
                read_jsonl(str(Path(str(t["path"])).expanduser()), n if n is not None else 10**9)
            except ValueError as err:
                p.append(str(err))
            return p
        knobs = t.get("knobs") or {}
        if t.get("kind") not in GENERATORS:
            p.append(
                f"trace.kind={t.get('kind')!r}: one of {sorted(GENERATORS)} (or trace.path=<file.jsonl>)"
            )
        elif not isinstance(knobs, dict):
            p.append(f"trace.knobs={knobs!r}: a mapping of the {t['kind']} generator's knobs")
        else:
            try:
                make_trace(t["kind"], n if n is not None else 10**6, knobs)
            except ValueError as err:
                p.append(str(err))
        return p

    # ----- the shape's interface ---------------------------------------------------------------------
    def problems(self, cfg: DictConfig) -> list[str]:
        if self.bench is None:
            return [
                f"policies={_plain(cfg.policies)!r}: an agent job replays traces over a window benchmark's "
                f"items (bench=window_toy, window_synthetic or videomme_window), not bench={cfg.bench.name}"
            ]
        p = unread_lists(cfg, self.kinds, "an agent job (policies=[…]) runs policies only")
        return p + self.window_problems(cfg) + self.trace_problems(cfg)

    def plugin_problems(self, cfg: DictConfig, built: dict[str, list[Spec]]) -> list[str]:
        """Each policy's own problems with the trace's window and steps (a generator's knobs; None for a JSONL
        trace, whose policies check the trace they are given)."""
        t = self.trace(cfg)
        knobs = t.get("knobs") if not t.get("path") and isinstance(t.get("knobs"), dict) else {}
        window, steps = knobs.get("window"), knobs.get("steps")
        return [
            f"policies: {s.label}: {line}"
            for specs in built.values()
            for s in specs
            for line in s.plugin.problems(window=window, steps=steps)
        ]

    def specs(self, cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
        """(policies, []): an agent job's rows are keyed by the policy as arm rows are by the arm."""
        return build_specs("policy", cfg.policies), []

    def cost_forwards(
        self, cfg: DictConfig, tokens: dict, specs: tuple[list[Spec], list[Spec]], n_layers: int
    ) -> tuple[list[Forward], float]:
        """Per pool, an upper bound: each step's re-prefill and blind query, and per policy a prefill of the whole
        window and its query (a policy that reuses prefills less)."""
        t, chunk = self.trace(cfg), int(tokens["chunk"])
        knobs = t.get("knobs") or {}
        k, steps = int(knobs.get("window", 4)), int(knobs.get("steps", 12))
        window, q, n_pol = k * chunk, 60, len(specs[0])
        per_step = [
            Forward(window + q, window / 2),
            Forward(q, window),
            Forward(window, window / 2, n_pol),
            Forward(q, window, n_pol),
        ]
        pool = self.pool_size(cfg) or k
        return [Forward(f.tokens, f.context, f.count * steps) for f in per_step], pool * int(
            tokens.get("image_tokens", 0)
        )

    def evaluate_item(
        self,
        adapter: Adapter,
        entry: WindowEntry,
        arms: list[Spec],
        probes: list[Spec],
        cfg: DictConfig,
        keys: dict,
    ) -> tuple[list[dict], list[dict], list[dict]]:
        """Replay the job's trace over one pool with every policy in ``arms``: (rows, no probe records, no refusals)."""
        if probes:
            raise ValueError("an agent job runs policies only")
        t0 = time.perf_counter()
        try:
            wctx = WindowContext(adapter, entry.build(adapter), cfg.canonical_context, cfg.eta_floor)
        except ValueError as err:
            raise ItemError(
                f"window item {entry.item_id} cannot be encoded by {adapter.name}: {err}"
            ) from err
        t = self.trace(cfg)
        n = len(wctx.chunks)
        path = str(Path(str(t["path"])).expanduser()) if t.get("path") else None
        try:
            trace = make_trace(
                str(t.get("kind")), n, dict(t.get("knobs") or {}), cfg.seed, item_seed(entry.item_id), path
            )
        except ValueError as err:
            raise ItemError(f"pool {entry.item_id} ({n} chunks): {err}") from err
        budget = t.get("budget")
        mean_tokens = sum(c.n_tokens for c in wctx.chunks) / n
        capacity = None if budget is None else int(budget * mean_tokens * page_bytes_per_token(wctx))
        flops = paper_model_flops(str(t["cost_model"])) if t.get("cost_model") else None
        shared = time.perf_counter() - t0
        got = replay(
            wctx,
            trace,
            [(s.label, s.plugin) for s in arms],
            capacity,
            str(t.get("eviction", "lru")),
            flops,
            keep=int(cfg.window_keep_gb * GIB),
        )
        rows = []
        for s in arms:
            rank = getattr(s.plugin, "rank", None)
            for r in got[s.label]:
                rows.append(
                    row(
                        keys,
                        entry,
                        s,
                        {
                            **ARM_COLUMNS,
                            "params": json.dumps(s.plugin.params(), sort_keys=True, default=str),
                            "rank": math.nan if rank is None else rank,
                            "effective_rank": math.nan,
                            "n_b": r["n_window_tokens"],
                            "delta": math.nan,
                            "bytes": r["bytes_stored"],
                            "bytes_frac": math.nan,
                            "patch_dtype": None,
                            "n_choices": len(wctx.item.choices or ()),
                            "shared_seconds": shared,
                            "trace": trace.kind,
                            "pool": n,
                            "capacity": capacity,
                            **r,
                        },
                        {"shape": "agent"},
                    )
                )
        return rows, [], []


SHAPE = AgentItems  # this room's job shape (kamera.discover.job_shapes)
