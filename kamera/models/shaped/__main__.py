"""``python -m kamera.models.shaped MODEL [MODEL ...] --out DIR``: write shaped checkpoints into a models root."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from kamera.models.registry import UnknownModelError, entry
from kamera.models.shaped import shaped_models, shaped_writer


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
    ap.add_argument("--tokenizers", type=Path, default=None,
                    help="folder of real tokenizer files (qwen2/, llama2/); default $KAMERA_TOKENIZERS; stand-ins without")
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
        info = json.loads((out / "shaped.json").read_text())
        print(f"{name}: {out} ({info['parameters'] / 1e9:.2f} B parameters, tokenizer {info['tokenizer']}, "
              f"{time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
