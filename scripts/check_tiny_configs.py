"""Snapshot, or compare against a snapshot, what every tiny experiment runs: its manifest and its jobs' keys.

    python scripts/check_tiny_configs.py --save /tmp/before.json      # before editing conf/experiment
    python scripts/check_tiny_configs.py --compare /tmp/before.json   # after: exit 1 naming every difference

Per ``<x>_tiny.yaml`` of conf/experiment: the lines ``python -m kamera.sweep --manifest experiment=<x>_tiny``
prints, and per job of ``kamera.sweep.expand`` its ``kamera.job.config_key`` and its composed config without
the keys that do not reach a job's numbers or its outputs' values (``paper``, the paper's values the renderer
prints, ``cost``, ``hydra``). A tiny config that derives from its paper config (Hydra ``defaults``) must leave
all three unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from kamera.job import CONF_DIR, config_key
from kamera.sweep import compose_config, expand
from kamera.sweep import main as sweep_main

IGNORED = ("paper", "cost", "hydra", "tiny_sweep")  # tiny_sweep: the sweep, which the manifest covers


def tiny_experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*_tiny.yaml"))


def snapshot(name: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sweep_main(["--manifest", f"experiment={name}"])
    jobs = []
    for job in expand([f"experiment={name}"]):
        cfg = compose_config(job)
        plain = OmegaConf.to_container(cfg, resolve=True)
        for key in IGNORED:
            plain.pop(key, None)
        jobs.append({"overrides": job, "config_key": config_key(cfg), "config": plain})
    return {"manifest": out.getvalue().splitlines(), "jobs": jobs}


def differences(before: dict, after: dict) -> list[str]:
    found = []
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b is None or a is None:
            found.append(f"{name}: only {'after' if b is None else 'before'}")
            continue
        if b["manifest"] != a["manifest"]:
            found.append(f"{name}: manifest differs:\n  before {b['manifest']}\n  after  {a['manifest']}")
        for i, (jb, ja) in enumerate(zip(b["jobs"], a["jobs"], strict=False)):
            if jb["config_key"] != ja["config_key"]:
                found.append(f"{name} job {i}: config_key {jb['config_key']} → {ja['config_key']}")
            if jb["config"] != ja["config"]:
                keys = sorted(
                    k for k in set(jb["config"]) | set(ja["config"]) if jb["config"].get(k) != ja["config"].get(k)
                )
                found.append(f"{name} job {i}: composed config differs in {keys}")
        if len(b["jobs"]) != len(a["jobs"]):
            found.append(f"{name}: {len(b['jobs'])} jobs → {len(a['jobs'])}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="write the snapshot of every tiny experiment here")
    mode.add_argument("--compare", type=Path, help="compare every tiny experiment with this snapshot")
    args = ap.parse_args(argv)
    now = {name: snapshot(name) for name in tiny_experiments()}
    if args.save:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True, default=str))
        print(f"{args.save}: {len(now)} tiny experiments, {sum(len(v['jobs']) for v in now.values())} jobs")
        return 0
    found = differences(json.loads(args.compare.read_text()), json.loads(json.dumps(now, default=str)))
    print("\n".join(found) if found else f"{len(now)} tiny experiments: manifests, config keys and configs unchanged")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
