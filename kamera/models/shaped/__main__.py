"""``python -m kamera.models.shaped MODEL [MODEL ...] --out DIR``: write shaped checkpoints into a models root."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from safetensors import SafetensorError

from kamera.models.registry import UnknownModelError, entry
from kamera.models.shaped import shaped_models, shaped_writer


def out_problem(out: Path) -> str | None:
    """Why ``--out`` cannot be a models root to write into, or None: the nearest part of its path that exists is a
    file, is a checkpoint itself (or inside one: config.json beside safetensors weights), or is not writable."""
    there = Path(os.path.abspath(out))
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        return f"--out {out}: {there} is a file, not a folder"
    for d in (there, *there.parents):
        if (d / "config.json").is_file() and any(d.glob("*.safetensors")):
            return (f"--out {out}: {d} is a checkpoint (config.json and safetensors weights); --out is the models "
                    "root the checkpoints go into, as <out>/<Hub repo name>/")
    if not os.access(there, os.W_OK | os.X_OK):
        return f"--out {out}: {there} is read-only or not writable by this user"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kamera.models.shaped",
        description="Write a paper model's shaped checkpoint (real config, tokenizer and file layout; random weights; "
                    "few layers) as <out>/<Hub repo name>/, loadable with KAMERA_MODELS=<out>.",
    )
    ap.add_argument("models", nargs="+", help=f"registered paper models, or 'all' ({', '.join(shaped_models())})")
    ap.add_argument("--out", required=True, type=Path, help="models root to write into")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    ap.add_argument("--vision-layers", type=int, default=2, help="vision / audio tower layers (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--tokenizers",
        type=Path,
        default=None,
        help="folder of real tokenizer files (qwen2/, llama2/); default $KAMERA_TOKENIZERS; stand-ins without",
    )
    args = ap.parse_args(argv)
    names = shaped_models() if args.models == ["all"] else args.models
    try:
        for name in names:
            shaped_writer(name)
    except (UnknownModelError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.layers < 1 or args.vision_layers < 1:
        print("error: --layers and --vision-layers must be >= 1", file=sys.stderr)
        return 2
    if why := out_problem(args.out):
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.tokenizers is not None:
        if not args.tokenizers.is_dir():
            print(f"error: --tokenizers {args.tokenizers} is not a directory", file=sys.stderr)
            return 2
        os.environ["KAMERA_TOKENIZERS"] = str(args.tokenizers)
    for name in names:
        out = args.out / entry(name).repo_dir
        t = time.perf_counter()
        try:
            shaped_writer(name)(out, layers=args.layers, vision_layers=args.vision_layers, seed=args.seed)
        except FileExistsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except ValueError as e:  # a layer count this model cannot have (Phi-3.5-V reads CLIP's second-to-last layer)
            print(f"error: {e}", file=sys.stderr)
            return 2
        except (OSError, SafetensorError) as e:  # a full disk mid-write: the writer removed its staging folder
            print(f"error: cannot write {out}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
            return 1
        info = json.loads((out / "shaped.json").read_text())
        print(
            f"{name}: {out} ({info['parameters'] / 1e9:.2f} B parameters, tokenizer {info['tokenizer']}, "
            f"{time.perf_counter() - t:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
