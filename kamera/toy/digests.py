"""The shipped toy weights' digests: ``kamera/toy/weights.sha256`` lists the sha256 of every file under
``kamera/toy/weights/`` in ``sha256sum`` format (so ``cd kamera/toy && sha256sum -c weights.sha256`` checks them
too). Preflight compares a toy model's files with it before they load, so a corrupted or locally edited weight
file is one line naming it, never a job keyed by weights nobody trained. After retraining into the shipped
folders (``python -m kamera.toy.train … --out kamera/toy/weights/<variant>``), rewrite the list with
``python -m kamera.toy.digests --update`` and commit both.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DIGESTS = ROOT / "weights.sha256"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()  # the shipped files are a few MB


def shipped(root: Path = ROOT) -> dict[str, str]:
    """Relative path (from ``root``, kamera/toy) → sha256, as recorded in its weights.sha256."""
    out = {}
    for line in (root / DIGESTS.name).read_text().splitlines():
        digest, _, name = line.partition("  ")
        out[name] = digest
    return out


def weight_problems(folder: Path, root: Path = ROOT) -> list[str]:
    """Why a shipped toy weights folder (under ``root``, kamera/toy) does not match the digests recorded there
    (empty when it does): a file that differs, is missing, or is not recorded."""
    recorded = {n: d for n, d in shipped(root).items() if (root / n).parent == folder}
    have = {str(f.relative_to(root)): f for f in sorted(folder.glob("*")) if f.is_file()}
    fix = ("restore it (git checkout -- kamera/toy/weights) or, after retraining, "
           "run python -m kamera.toy.digests --update")
    problems = [f"{root / n}: missing (listed in {DIGESTS.name}); {fix}" for n in sorted(set(recorded) - set(have))]
    problems += [f"{root / n}: not listed in {DIGESTS.name}; {fix}" for n in sorted(set(have) - set(recorded))]
    problems += [
        f"{have[n]}: sha256 {got[:12]}… differs from the shipped {recorded[n][:12]}… ({DIGESTS.name}); {fix}"
        for n in sorted(set(have) & set(recorded))
        if (got := _sha256(have[n])) != recorded[n]
    ]
    return problems


def update() -> Path:
    """Rewrite weights.sha256 from the files now under kamera/toy/weights."""
    files = sorted(f for f in (ROOT / "weights").rglob("*") if f.is_file())
    DIGESTS.write_text("".join(f"{_sha256(f)}  {f.relative_to(ROOT)}\n" for f in files))
    return DIGESTS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check or rewrite the shipped toy weights' digests.")
    ap.add_argument("--update", action="store_true", help="rewrite kamera/toy/weights.sha256 from the files")
    args = ap.parse_args(argv)
    if args.update:
        print(f"wrote {update()}")
        return 0
    problems = [p for d in sorted((ROOT / "weights").iterdir()) if d.is_dir() for p in weight_problems(d)]
    print("\n".join(problems) if problems else f"toy weights match {DIGESTS}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
