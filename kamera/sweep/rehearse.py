"""``make rehearse``: every paper experiment, end to end on CPU, on shaped checkpoints and fixture data.

    python -m kamera.sweep.rehearse [--experiments table3,fig5] [--out outputs/rehearse] [--tokenizers DIR]

For each paper experiment in ``conf/experiment`` (every file not ending in ``_tiny``) it expands the
sweep, writes (or reuses from the cache, see :func:`kamera.models.shaped.ensure`) the shaped checkpoint of every
model that has an adapter, lays them out as ``<out>/models/<Hub repo>/`` and a tiny copy of every
benchmark as ``<out>/data/<benchmark dir>/`` (the layouts ``KAMERA_MODELS`` and ``KAMERA_DATA`` expect),
then drives the harness only through its command line:

    python -m kamera.sweep --check experiment=<exp> model=<models with adapters> paths.models=… paths.data=…
    python -m kamera.run -m experiment=<exp> model=<…> n_items=1 paths.models=… paths.data=… paths.results=…

Models without an adapter are not run; the summary names each with the reason. A text-only model on a benchmark
whose fixture items hold images (Gemma-3n, served without its vision tower) is left out of that experiment, named
with preflight's reason. Exit status 0 when every
job of every rehearsed model finished; 1 otherwise; 2 before anything runs when ``<out>/results`` or
``<out>/outputs`` holds files a rehearsal did not create: a rehearsal marks the folders it creates
(:data:`MARKER`) and deletes only those, never rows or tables of another origin.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from kamera.data import BENCHMARKS, load_items, make_fixture
from kamera.job.shapes import shape_of
from kamera.models import entry, image_problems
from kamera.models.shaped import models_root
from kamera.sweep.cost import experiment_hours
from kamera.sweep.expand import compose_config, composed, paper_experiments

# Probes that only time on a GPU, and the CPU probe a rehearsal runs in their place (same code, other device).
CPU_STANDINS = {"ttft_cuda": "ttft"}


class SweepJob(NamedTuple):
    model: str
    bench: str
    testbed: str | None  # the testbed the sweep names for this job, if it sweeps testbeds
    probes: tuple[str, ...]
    data: str | None = None  # the data benchmark whose files it reads (its shape says), None: none


def rehearsal_jobs(experiment: str) -> list[SweepJob]:
    """Model, benchmark name, testbed, probe labels and data benchmark read of every job of ``experiment``."""
    out = []
    for job, cfg in composed([f"experiment={experiment}"]):
        testbed = next((o.split("=", 1)[1] for o in job if o.startswith("testbed=")), None)
        probes = tuple(p if isinstance(p, str) else next(iter(p)) for p in (cfg.get("probes") or []))
        out.append(SweepJob(str(cfg.model.name), str(cfg.bench.name), testbed, probes, shape_of(cfg).reads(cfg)))
    return out


def selection(jobs: list[SweepJob], ready: set[str]) -> list[str]:
    """The sweep overrides that keep the jobs whose model is ready, and put a CPU probe where a probe times on a GPU.

    A sweep over testbeds is narrowed by testbed (a ``model=`` override would replace each testbed's model and
    keep its benchmark options, running models on testbeds not theirs); any other sweep by model."""
    kept = [j for j in jobs if j.model in ready]
    if any(j.testbed for j in kept):
        select = [f"testbed=choice({','.join(dict.fromkeys(j.testbed for j in kept))})"]
    else:
        select = [f"model=choice({','.join(sorted({j.model for j in kept}))})"]
    probes = next((j.probes for j in kept if set(j.probes) & set(CPU_STANDINS)), None)
    if probes is not None:
        select.append(f"probes=[{','.join(CPU_STANDINS.get(p, p) for p in probes)}]")
    return select


def unreadable(job: SweepJob, data: Path) -> str | None:
    """Why ``job``'s model cannot read its benchmark (preflight's line for a text-only model on items with images,
    read off the first fixture item), or None; only a job whose items are its data benchmark's own is checked here
    (a window job's text-only model is preflight's line)."""
    if entry(job.model).reads_images or job.data != job.bench:
        return None
    spec = BENCHMARKS[job.bench]
    items = load_items(job.bench, root=data / spec.dir_name if spec.dir_name else None, n_items=1, seed=0)
    problems = image_problems(job.model, None, job.bench, [item.spans for item in items])
    return problems[0] if problems else None


def _run(cmd: list[str], env: dict, log: Path) -> tuple[int, float, int]:
    """Run ``cmd`` with its output appended to ``log``; (exit status, seconds, peak RSS bytes of the child)."""
    t = time.perf_counter()
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return code, time.perf_counter() - t, rss


# A rehearsal's own folders under --out: emptied before each rehearsal (the runner would skip stored rows), and
# only when the marker file a rehearsal writes into each folder it creates is there.
OWN = ("results", "outputs")
MARKER = ".kamera-rehearsal"


def not_ours(out: Path) -> list[Path]:
    """The folders of ``OWN`` under ``out`` that hold files a rehearsal did not create (no marker file in them)."""
    found = []
    for name in OWN:
        path = out / name
        if path.is_symlink() or path.is_file():
            found.append(path)
        elif path.is_dir() and not (path / MARKER).is_file() and any(path.iterdir()):
            found.append(path)
    return found


def fresh_folders(out: Path) -> None:
    """Delete the folders of ``OWN`` a rehearsal created (their marker file says so) and create them anew,
    marked; call :func:`not_ours` first (this never deletes an unmarked folder that holds anything)."""
    for name in OWN:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            if (path / MARKER).is_file():
                shutil.rmtree(path)
            elif not any(path.iterdir()):
                path.rmdir()
        path.mkdir(parents=True)
        (path / MARKER).write_text("created by python -m kamera.sweep.rehearse: "
                                   "the next rehearsal deletes this folder\n")


def rehearse(experiments: list[str], out: Path, *, layers: int = 2, vision_layers: int = 2) -> int:
    """Every job of ``experiments`` on shaped checkpoints and fixture data under ``out``: 0 when every rehearsed job
    finished, 1 otherwise, 2 when ``out`` holds folders a rehearsal did not create (nothing is touched then)."""
    out = out.resolve()
    log = out / "rehearse.log"
    theirs = not_ours(out)
    if theirs:
        print(f"error: {', '.join(map(str, theirs))} holds files a rehearsal did not create (no {MARKER} in it); "
              "a rehearsal deletes its own results first: pass another --out (REHEARSE_DIR) or move those aside",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    fresh_folders(out)
    log.write_text("")
    jobs = {exp: rehearsal_jobs(exp) for exp in experiments}
    ready = sorted({j.model for js in jobs.values() for j in js
                    if entry(j.model).has_adapter and entry(j.model).shaped})
    print(f"rehearsing {', '.join(experiments)} on shaped checkpoints ({layers} layers, "
          f"{vision_layers} vision layers); "
          f"log: {log}", flush=True)
    given = inputs(ready, jobs, out, layers, vision_layers)
    failed = [why for exp in experiments if (why := rehearse_one(exp, jobs[exp], ready, given, log))]
    report_missing(sorted({j.model for js in jobs.values() for j in js if j.model not in ready}))
    report_costs(experiments)
    print(f"rows under {out / 'results'}; "
          + ("all rehearsed jobs finished" if not failed else "FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


class Inputs(NamedTuple):
    """What every command of a rehearsal is given: its environment, its path overrides, the fixture data folder."""

    env: dict
    paths: list[str]
    data: Path


def inputs(ready: list[str], jobs: dict[str, list[SweepJob]], out: Path, layers: int, vision_layers: int) -> Inputs:
    """The shaped checkpoints of the ``ready`` models under ``<out>/models`` and a fixture copy of every data benchmark
    the jobs read under ``<out>/data``, laid out as ``KAMERA_MODELS`` and ``KAMERA_DATA`` expect."""
    t = time.perf_counter()
    models = models_root(ready, out / "models", layers=layers, vision_layers=vision_layers)
    print(f"  checkpoints: {', '.join(ready)} in {models} ({time.perf_counter() - t:.0f} s)", flush=True)
    data = out / "data"
    for bench in sorted({j.data for js in jobs.values() for j in js} - {None}):
        spec = BENCHMARKS[bench]
        if spec.dir_name and not (data / spec.dir_name).exists():
            make_fixture(bench, data, n=2, seed=0)
    env = {**os.environ, "KAMERA_MODELS": str(models), "KAMERA_DATA": str(data), "WANDB_MODE": "disabled",
           "HF_HUB_OFFLINE": "1"}
    return Inputs(env, [f"paths.models={models}", f"paths.data={data}", f"paths.results={out / 'results'}",
                        f"paths.outputs={out / 'outputs'}"], data)


def rehearse_one(exp: str, jobs: list[SweepJob], ready: list[str], given: Inputs, log: Path) -> str | None:
    """Preflight, then run, the jobs of ``exp`` whose model is ready and reads the benchmark's items (one line
    each printed); what failed, or None."""
    env, paths = given.env, given.paths
    text_only = {j.model: why for j in jobs if j.model in ready and (why := unreadable(j, given.data))}
    for why in sorted(set(text_only.values())):
        print(f"  {exp}: not run: {why}")
    runnable = set(ready) - set(text_only)
    names = sorted({j.model for j in jobs if j.model in runnable})
    skipped = sorted({j.model for j in jobs if j.model not in ready})
    if skipped:
        print(f"  {exp}: not run for {', '.join(skipped)} (see below)")
    if not names:
        print(f"  {exp}: no model of this sweep has an adapter yet; nothing to rehearse")
        return None
    select = selection(jobs, runnable)
    if any(o.startswith("probes=") for o in select):
        print(f"  {exp}: GPU-timed probes run on CPU here ({select[-1]})")
    code, _, _ = _run([sys.executable, "-m", "kamera.sweep", "--check", f"experiment={exp}", *select, *paths], env, log)
    if code != 0:
        print(f"  {exp}: preflight FAILED (see {log})")
        return f"{exp}: preflight failed"
    n_jobs = sum(1 for j in jobs if j.model in names)
    code, secs, rss = _run([sys.executable, "-m", "kamera.run", "-m", f"experiment={exp}", *select, "n_items=1",
                            "device=cpu", *paths], env, log)
    status = "ok" if code == 0 else f"FAILED (exit {code}, see {log})"
    print(f"  {exp}: {n_jobs} job(s) on {', '.join(names)}: {status}, {secs:.0f} s, peak {rss / 2**30:.1f} GiB")
    return None if code == 0 else f"{exp}: run exit {code}"


def report_missing(missing: list[str]) -> None:
    """One line per model not rehearsed: it has no adapter (and the registry's note why) or no shaped writer."""
    for m in missing:
        e = entry(m)
        why = (f"has no adapter yet: {e.notes or 'unverified family'}" if not e.has_adapter
               else "has no shaped-checkpoint writer")
        print(f"  not rehearsed: {m} ({e.family}) {why}")


def report_costs(experiments: list[str]) -> None:
    """Each experiment's estimated H100-hours at paper scale beside the figure its config states."""
    for exp in experiments:
        try:
            _, hours = experiment_hours([f"experiment={exp}"])
        except ValueError as e:  # an experiment without its cost assumptions: the jobs above still count
            print(f"  {exp} at paper scale: no estimate ({e})")
            continue
        stated = compose_config([f"experiment={exp}"]).get("cost", {}).get("h100_hours")
        print(f"  {exp} at paper scale: ~{hours:.2f} H100-hours estimated "
              f"(stated in conf/experiment/{exp}.yaml: {stated}; "
              f"python -m kamera.sweep.cost experiment={exp} for the jobs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kamera.sweep.rehearse", description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", default=None,
                    help=f"comma-separated (default: all of {', '.join(paper_experiments())})")
    ap.add_argument("--out", type=Path, default=Path("outputs/rehearse"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vision-layers", type=int, default=2)
    ap.add_argument("--tokenizers", type=Path, default=None,
                    help="real tokenizer files (qwen2/, llama2/); default $KAMERA_TOKENIZERS")
    args = ap.parse_args(argv)
    known = paper_experiments()
    experiments = known if args.experiments is None else [e.strip() for e in args.experiments.split(",") if e.strip()]
    bad = [e for e in experiments if e not in known]
    if bad or not experiments:
        print(f"error: unknown paper experiment(s) {bad}; conf/experiment has: {', '.join(known)}", file=sys.stderr)
        return 2
    there = args.out.absolute()
    while not there.exists() and there != there.parent:
        there = there.parent  # the nearest part of the path that exists: what mkdir -p would start from
    if not there.is_dir():
        print(f"error: --out {args.out} (REHEARSE_DIR): {there} is a file, not a folder; pass a folder",
              file=sys.stderr)
        return 2
    if args.tokenizers is not None:
        os.environ["KAMERA_TOKENIZERS"] = str(args.tokenizers)
    return rehearse(experiments, args.out, layers=args.layers, vision_layers=args.vision_layers)


if __name__ == "__main__":
    sys.exit(main())
