"""Train the toy binding model from scratch on CPU: ``python -m kamera.toy.train --out DIR``.

Loss: cross-entropy on every answer packed after B, plus training scaffolding that is never saved:
- two linear probes on layer 0's output at each object token of B: its colour, read from A (weight 1),
  and its location, the previous token (weight 0.5), which gets layer 0 off the plateau;
- an attention hint: at queries that read B, −log of layer 1's head-mean attention on the B object
  token holding the answer (weight 1). Without it, two-hop and control_b stayed at chance on 16-entry
  worlds for 1,700+ steps (likely because the query word also matches B's location token, whose value
  is useless); with it every query kind is at 1.0 held-out by step ~700.
Worlds bind a random number of entries, capped low at first and growing over training, and a few
B-only sequences per step keep a B read valid without A (so the control_b query survives blind reuse).
Progress shows steps, rate, ETA, the entry cap, the losses and held-out accuracy per query kind.

``--variant window`` trains the text decoder on the toy window task (:mod:`kamera.toy.window_task`) with the
same losses: :class:`WindowSampler` draws windows of 1 … n_entries/per_state states in front of a scene (the
entry cap ramps as above), 0 … ``--max-after`` states after it, and a full or partial scene; the B-only
sequences are a scene alone. Held-out accuracy is on recall-sized windows.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from PIL import Image
from torch.nn import functional as F

from kamera.toy import render, window_task
from kamera.toy.items import items
from kamera.toy.model import MODEL_VARIANTS, WordTokenizer, build, image_processor, save
from kamera.toy.task import HELDOUT, KINDS, PREFIX, QUERY_WORD, TaskSpec, World, compound
from kamera.toy.window_task import WindowSpec

MIX = {"two_hop": 0.5, "control": 0.25, "control_b": 0.25}  # query kinds packed after B during training
Query = tuple[str, str, str]  # (kind, argument word, answer word)


def image_words(n_cells: int) -> str:
    return " ".join(["<vision_start>", *["<image>"] * n_cells, "<vision_end>"])


def sequence_words(world: World, queries: Sequence[Query], variant: str = "text", with_a: bool = True) -> str:
    """The words of ``[prefix, A, B, queries]`` (images as their placeholder tokens), answers included."""
    if not with_a and any(kind != "control_b" for kind, _, _ in queries):
        raise ValueError("a sequence without A can only carry control_b queries")
    k = len(world.a)
    if variant == "text":
        a, b = world.a_text(), world.b_text()
    else:
        a = "A: " + image_words(render.grid_cells(k, render.A_COLUMNS))
        b = "B: " + image_words(render.grid_cells(2 * k, 2 * render.PAIRS_PER_ROW))
    parts = [PREFIX, *([a] if with_a else []), b, *(f"{QUERY_WORD[kind]} {arg} {ans}" for kind, arg, ans in queries)]
    return " ".join(parts)


class Pixels:
    """Qwen2-VL pixel rows of toy images, assembled from per-cell rows of the real image processor.

    A cell is one merged token, i.e. 4 consecutive processor rows, so an image's rows are its cells' rows in
    raster order (the test checks this against the processor on the whole image); cells are processed once.
    """

    def __init__(self) -> None:
        self.processor = image_processor()
        self.rows: dict[render.Cell, torch.Tensor] = {}

    def cell_rows(self, cell: render.Cell) -> torch.Tensor:
        if cell not in self.rows:
            image = Image.fromarray(render.draw(cell))
            self.rows[cell] = self.processor(images=[image], return_tensors="pt")["pixel_values"]
        return self.rows[cell]

    def image(self, cells: list[render.Cell], columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel_values, grid_thw [3]) of the picture ``render.grid(cells, columns)`` draws."""
        padded = render.pad(cells, columns)
        rows = len(padded) // columns
        return torch.cat([self.cell_rows(c) for c in padded]), torch.tensor([1, 2 * rows, 2 * columns])

    def world(self, world: World, with_a: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = [self.image(render.a_cells(world), render.A_COLUMNS)] if with_a else []
        return [*out, self.image(render.b_cells(world), 2 * render.PAIRS_PER_ROW)]


@dataclass
class Batch:
    """Token ids [b, L] (+ pixels for images); answer positions/targets; B's object positions and their
    location (previous token) and colour ids."""

    ids: torch.Tensor
    answer_pos: torch.Tensor
    answer_ids: torch.Tensor
    object_pos: torch.Tensor
    object_prev: torch.Tensor
    object_colour: torch.Tensor | None  # None for B-only sequences (no A to read a colour from)
    target_pos: torch.Tensor  # [b, n_queries]: the B object token a query's answer sits at (-1: not in B)
    pixel_values: torch.Tensor | None = None
    grid_thw: torch.Tensor | None = None


class Sampler:
    """Turns worlds and queries into model inputs for one variant (the same encoding the harness sees)."""

    def __init__(self, spec: TaskSpec, tok: WordTokenizer, variant: str) -> None:
        self.spec, self.tok, self.variant = spec, tok, variant
        self.pixels = Pixels() if variant == "image" else None
        self.colour_index = {c: i for i, c in enumerate(spec.colours)}
        self.query_ids = torch.tensor([tok.ids[w] for w in QUERY_WORD.values()])

    def encode(self, worlds: Sequence[World], queries: Sequence[Sequence[Query]], with_a: bool = True) -> Batch:
        """One batch; every world must bind the same number of entries (so all rows share one layout)."""
        ids = torch.tensor(
            [self.tok.encode(sequence_words(w, q, self.variant, with_a)) for w, q in zip(worlds, queries, strict=True)]
        )
        k = len(worlds[0].a)
        b0 = int((ids[0] == self.tok.ids["B:"]).nonzero()[0, 0])
        first = b0 + (2 if self.variant == "text" else 3)  # B: [<vision_start>] location object location object …
        object_pos = (first + 2 * torch.arange(k)).expand(len(worlds), -1)
        answer_pos = torch.isin(ids[0], self.query_ids).nonzero()[:, 0] + 1
        rows = torch.arange(len(worlds))[:, None]
        answer_ids = ids[rows, answer_pos + 1]
        prev = torch.tensor([[self.tok.ids[loc] for loc, _ in w.b] for w in worlds])
        colour = torch.tensor([[self.colour_index[w.colour_of[o]] for _, o in w.b] for w in worlds]) if with_a else None
        target = torch.tensor(
            [
                [first + 2 * [loc for loc, _ in w.b].index(arg) if kind != "control" else -1 for kind, arg, _ in q]
                for w, q in zip(worlds, queries, strict=True)
            ]
        )
        batch = Batch(ids, answer_pos.expand(len(worlds), -1), answer_ids, object_pos, prev, colour, target)
        if self.pixels is not None:
            images = [im for w in worlds for im in self.pixels.world(w, with_a)]
            batch.pixel_values = torch.cat([p for p, _ in images])
            batch.grid_thw = torch.stack([g for _, g in images])
        return batch

    def sample(self, rng: np.random.Generator, size: int, n_queries: int, k: int, with_a: bool = True) -> Batch:
        """``size`` fresh worlds of ``k`` entries, each with ``n_queries`` queries drawn from MIX (control_b only
        without A)."""
        worlds, queries = [], []
        for _ in range(size):
            world = World.sample(self.spec, rng, k)
            worlds.append(world)
            queries.append([(kind, *world.question(kind, rng)) for kind in draw_kinds(rng, n_queries, with_a)])
        return self.encode(worlds, queries, with_a)

    def heldout(self, kind: str, n: int, seed: int) -> tuple[Batch, torch.Tensor, torch.Tensor]:
        """(batch, choice ids, gold choice index) of ``n`` held-out items of one query kind."""
        its = items(self.spec, kind, n, seed, self.variant)
        batch = self.encode([it.world for it in its], [[(kind, it.argument, it.answer)] for it in its])
        choice_ids = torch.tensor([self.tok.ids[c] for c in its[0].choices])
        return batch, choice_ids, torch.tensor([it.gold for it in its])


def draw_kinds(rng: np.random.Generator, n: int, with_a: bool = True) -> list[str]:
    """``n`` query kinds drawn from MIX (control_b only when the sequence has no A)."""
    kinds = list(MIX) if with_a else ["control_b"]
    p = np.array([MIX[q] for q in kinds]) / sum(MIX[q] for q in kinds)
    return [kinds[i] for i in rng.choice(len(kinds), n, p=p)]


class WindowSampler:
    """Training windows of the toy window task (:mod:`kamera.toy.window_task`): ``[prefix, states…, scene,
    states…, queries]``, one layout per batch so every row shares its positions.

    A layout: 1 … (``k`` entries ÷ ``per_state``) states before the scene, 0 … ``max_after`` after it (other
    objects), and a scene over all objects bound before it (half the batches) or a random subset. Within a
    sequence every object is bound once, so a two-hop answer is the colour the states in front of the scene give.
    """

    def __init__(self, spec: WindowSpec, tok: WordTokenizer) -> None:
        self.spec, self.tok, self.variant = spec, tok, "window"
        self.colour_index = {c: i for i, c in enumerate(spec.colours)}
        self.query_ids = torch.tensor([tok.ids[w] for w in QUERY_WORD.values()])

    def layout(self, rng: np.random.Generator, k: int) -> tuple[int, int, int]:
        """(states before the scene, states after it, scene pairs) for an entries cap of ``k``."""
        spec = self.spec
        n_before = int(rng.integers(1, max(1, min(spec.max_states, k // spec.per_state)) + 1))
        n_after = int(rng.integers(0, min(spec.max_after, spec.max_states - n_before) + 1))
        bound = n_before * spec.per_state
        return n_before, n_after, bound if rng.random() < 0.5 else int(rng.integers(1, bound + 1))

    def sample(
        self,
        rng: np.random.Generator,
        size: int,
        n_queries: int,
        k: int,
        with_a: bool = True,
        layout: tuple[int, int, int] | None = None,
        kind: str | None = None,
    ) -> Batch:
        """``size`` fresh windows (one layout, drawn for an entries cap of ``k`` unless given), ``n_queries``
        queries each (drawn from MIX, or all of ``kind``); without A a window is the scene alone with control_b
        queries."""
        n_before, n_after, m = layout or self.layout(rng, k)
        if not with_a:
            n_before, n_after = 0, 0
            m = int(rng.integers(1, max(1, k) + 1))
        rows = []
        for _ in range(size):
            s = window_task.Stream(self.spec, rng)
            before, after = s.states(n_before), s.states(n_after)
            objs = [o for g in before for o, _ in g] if with_a else s.take_objects(m)
            objs = [objs[i] for i in rng.choice(len(objs), m, replace=False)]
            pairs = s.scene([[(o, "")] for o in objs])
            colour_of = {o: c for g in (*before, *after) for o, c in g}
            queries = []
            for kd in draw_kinds(rng, n_queries, with_a) if kind is None else [kind] * n_queries:
                if kd == "control":
                    obj = list(colour_of)[int(rng.integers(len(colour_of)))]
                    queries.append((kd, obj, colour_of[obj]))
                else:
                    loc, obj = pairs[int(rng.integers(m))]
                    queries.append((kd, loc, colour_of[obj] if kd == "two_hop" else obj))
            rows.append((before, pairs, after, queries))
        return self.encode(rows, with_a)

    def encode(self, rows: Sequence[tuple], with_a: bool = True) -> Batch:
        """One batch from (states before, scene pairs, states after, queries) rows sharing one layout."""
        words = []
        for before, pairs, after, queries in rows:
            chunks = [window_task.state(g) for g in before], [window_task.state(g) for g in after]
            parts = [
                PREFIX,
                *(c.parts[0] for c in chunks[0]),
                window_task.scene(pairs).parts[0],
                *(c.parts[0] for c in chunks[1]),
                *(f"{QUERY_WORD[kd]} {arg} {ans}" for kd, arg, ans in queries),
            ]
            words.append(" ".join(parts))
        ids = torch.tensor([self.tok.encode(w) for w in words])
        b0 = int((ids[0] == self.tok.ids["B:"]).nonzero()[0, 0])
        m = len(rows[0][1])
        object_pos = (b0 + 2 + 2 * torch.arange(m)).expand(len(rows), -1)
        answer_pos = torch.isin(ids[0], self.query_ids).nonzero()[:, 0] + 1
        index = torch.arange(len(rows))[:, None]
        prev = torch.tensor([[self.tok.ids[loc] for loc, _ in pairs] for _, pairs, _, _ in rows])
        colour = None
        if with_a:
            colour = torch.tensor(
                [
                    [self.colour_index[{o: c for g in before for o, c in g}[o]] for _, o in pairs]
                    for before, pairs, _, _ in rows
                ]
            )
        target = torch.tensor(
            [
                [b0 + 2 + 2 * [loc for loc, _ in pairs].index(arg) if kd != "control" else -1 for kd, arg, _ in queries]
                for _, pairs, _, queries in rows
            ]
        )
        return Batch(
            ids, answer_pos.expand(len(rows), -1), ids[index, answer_pos + 1], object_pos, prev, colour, target
        )

    def heldout(self, kind: str, n: int, seed: int) -> tuple[Batch, torch.Tensor, torch.Tensor]:
        """``n`` held-out windows of the recall size (``window`` states before a full scene, one after) with one
        query of ``kind``; their own seed stream, never the training one."""
        spec = self.spec
        rng = np.random.default_rng([HELDOUT, seed, 200 + KINDS.index(kind)])
        layout = (spec.window, min(spec.max_after, spec.max_states - spec.window), spec.window * spec.per_state)
        batch = self.sample(rng, n, 1, spec.n_entries, layout=layout, kind=kind)
        choices = spec.objects if kind == "control_b" else spec.colours
        choice_ids = torch.tensor([self.tok.ids[c] for c in choices])
        gold = torch.tensor([choices.index(self.tok.vocab[int(i)]) for i in batch.ids[:, -1]])
        return batch, choice_ids, gold


def hidden(
    model: torch.nn.Module, batch: Batch, attentions: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(final hidden states, layer 0's output, layer 1's attention weights if asked), through the model's own
    modules (vision tower for images)."""
    if batch.pixel_values is None:
        out = model.model(input_ids=batch.ids, output_hidden_states=True, output_attentions=attentions)
        return out.last_hidden_state, out.hidden_states[1], out.attentions[-1] if attentions else None
    inner = model.model
    feats = torch.cat(inner.get_image_features(batch.pixel_values, batch.grid_thw).pooler_output)
    visual = batch.ids == model.config.image_token_id
    embeds = inner.get_input_embeddings()(batch.ids.masked_fill(visual, 0))
    embeds = embeds.masked_scatter(visual[..., None], feats.to(embeds.dtype))
    n_images = batch.grid_thw.shape[0] // batch.ids.shape[0]
    pos, _ = inner.get_rope_index(
        batch.ids[:1], mm_token_type_ids=visual[:1].int(), image_grid_thw=batch.grid_thw[:n_images]
    )  # every row shares one layout
    out = inner.language_model(
        inputs_embeds=embeds,
        position_ids=pos.expand(-1, batch.ids.shape[0], -1),
        output_hidden_states=True,
        output_attentions=attentions,
    )
    return out.last_hidden_state, out.hidden_states[1], out.attentions[-1] if attentions else None


class Probes(torch.nn.Module):
    """Linear read-outs of layer 0's output at B's object tokens (training scaffolding, never saved)."""

    def __init__(self, hidden: int, n_colours: int, vocab: int) -> None:
        super().__init__()
        self.colour = torch.nn.Linear(hidden, n_colours)
        self.prev = torch.nn.Linear(hidden, vocab)


def losses(
    model: torch.nn.Module, probes: Probes, batch: Batch, attn_weight: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Answer CE + colour probe (if A is present) + 0.5 · previous-token probe (+ the attention hint if weighted)."""
    last, h0, attn = hidden(model, batch, attentions=attn_weight > 0)
    rows = torch.arange(batch.ids.shape[0])[:, None]
    logits = model.lm_head(last[rows, batch.answer_pos])  # the head only where answers are read
    answer = F.cross_entropy(logits.flatten(0, 1), batch.answer_ids.flatten())
    h0 = h0[rows, batch.object_pos]
    prev = F.cross_entropy(probes.prev(h0).flatten(0, 1), batch.object_prev.flatten())
    total, parts = answer + 0.5 * prev, {"answer": answer.item(), "prev": prev.item()}
    if batch.object_colour is not None:
        colour = F.cross_entropy(probes.colour(h0).flatten(0, 1), batch.object_colour.flatten())
        total, parts["colour"] = total + colour, colour.item()
    if attn_weight > 0:
        # layer 1 at a B-reading query: -log of the head-mean attention on the B object token holding the answer
        valid = batch.target_pos >= 0
        at_query = attn.mean(1)[rows, batch.answer_pos]  # [b, n_q, L]
        mass = at_query.gather(-1, batch.target_pos.clamp_min(0)[..., None])[..., 0]
        hint = -torch.log(mass[valid] + 1e-6).mean()
        total, parts["attn"] = total + attn_weight * hint, hint.item()
    return total, parts


def factorize_compounds(model: torch.nn.Module, tok: WordTokenizer, spec: TaskSpec) -> None:
    """Start each compound token's embedding at (object + colour), so A ↔ B object matching is learnable from
    step 0 instead of being discovered through 24 × 16 unrelated embeddings."""
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for o in spec.objects:
            for c in spec.colours:
                emb[tok.ids[compound(o, c)]] = emb[tok.ids[o]] + emb[tok.ids[c]]


class HeldOut:
    """Fixed held-out items per kind, scored in one batched full forward (the re-prefill arm's computation)."""

    def __init__(self, sampler: Sampler | WindowSampler, n: int, seed: int) -> None:
        self.sets = {kind: sampler.heldout(kind, n, seed) for kind in KINDS}

    @torch.no_grad()
    def accuracy(self, model: torch.nn.Module) -> dict[str, float]:
        model.eval()
        acc = {}
        for kind, (batch, choice_ids, gold) in self.sets.items():
            last, _, _ = hidden(model, batch)
            logits = model.lm_head(last[:, -2])[:, choice_ids]  # the position that predicts the answer
            acc[kind] = float((logits.argmax(-1) == gold).float().mean())
        model.train()
        return acc


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to zero."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def entries_cap(step: int, args: argparse.Namespace, n_entries: int) -> int:
    """The most entries a world may bind at ``step``: from --min-entries up to n over the first --ramp of training."""
    frac = 1.0 if args.ramp <= 0 else min(1.0, step / (args.ramp * args.steps))
    return round(args.min_entries + frac * (n_entries - args.min_entries))


def fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def make_spec(args: argparse.Namespace) -> TaskSpec:
    """The task spec the arguments describe (a WindowSpec for ``--variant window``; unset sizes take the spec's
    defaults)."""
    sizes = {k: getattr(args, k) for k in ("n_objects", "n_colours", "n_locations", "n_entries")}
    if args.variant == "window":
        sizes.update(per_state=args.per_state, window=args.window, max_after=args.max_after)
        return WindowSpec(**{k: v for k, v in sizes.items() if v is not None})
    return TaskSpec(**{k: v for k, v in sizes.items() if v is not None})


def train(args: argparse.Namespace, command: str = "") -> dict:
    """Train, print progress, save weights + toy.json + train.json to ``args.out``; returns the training record."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    spec = make_spec(args)
    if not 1 <= args.min_entries <= spec.n_entries:
        raise ValueError(f"--min-entries must be in 1..{spec.n_entries}, got {args.min_entries}")
    model, tok = build(spec, args.variant)
    if args.factorized_init:
        factorize_compounds(model, tok, spec)
    if args.variant == "image" and args.freeze_patch_embed:  # a random projection of the pixels; halves the step
        model.model.visual.patch_embed.requires_grad_(False)
    if args.attn_hint > 0:  # attention weights need eager attention in the decoder (the vision tower keeps sdpa)
        model.set_attn_implementation({"text_config": "eager"} if args.variant == "image" else "eager")
    probes = Probes(model.config.get_text_config().hidden_size, spec.n_colours, len(tok))
    params = [p for p in [*model.parameters(), *probes.parameters()] if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.98))
    sampler = WindowSampler(spec, tok) if args.variant == "window" else Sampler(spec, tok, args.variant)
    held = HeldOut(sampler, args.eval_items, seed=1)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"toy {args.variant}: {n_params / 1e6:.2f} M parameters, vocab {len(tok)}, task {spec.to_dict()}", flush=True)

    t0, step, acc, logs = time.time(), 0, {}, []
    model.train()
    while step < args.steps:
        if args.max_minutes and time.time() - t0 > 60 * args.max_minutes:
            print(f"stopping at the time cap ({args.max_minutes} min)", flush=True)
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        k = int(rng.integers(args.min_entries, entries_cap(step, args, spec.n_entries) + 1))
        loss, parts = losses(model, probes, sampler.sample(rng, args.batch, args.queries, k), args.attn_hint)
        if args.b_only:
            b_loss, b_parts = losses(
                model, probes, sampler.sample(rng, args.b_only, args.queries, k, with_a=False), args.attn_hint
            )
            loss, parts["b_only"] = loss + b_loss, b_parts["answer"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            acc = held.accuracy(model)
            k_cap = entries_cap(step - 1, args, spec.n_entries)
            elapsed = time.time() - t0
            rate = step / elapsed
            logs.append({"step": step, "seconds": round(elapsed, 1), "loss": round(loss.item(), 4), **parts, **acc})
            print(
                f"step {step}/{args.steps} ({100 * step / args.steps:.0f}%)  {rate:.1f} it/s  k≤{k_cap}  "
                f"elapsed {fmt_time(elapsed)}  ETA {fmt_time((args.steps - step) / rate)}  loss {loss.item():.3f} ("
                + " ".join(f"{k} {v:.3f}" for k, v in parts.items())
                + ")  held-out "
                + "  ".join(f"{k} {v:.3f}" for k, v in acc.items()),
                flush=True,
            )
    seconds = time.time() - t0
    out = Path(args.out)
    save(model, tok, spec, args.variant, out)
    record = {
        "command": command,
        "args": vars(args),
        "task": spec.to_dict(),
        "steps_done": step,
        "train_seconds": round(seconds, 1),
        "heldout_accuracy": acc,
        "parameters": n_params,
        "versions": {"torch": torch.__version__, "transformers": tf.__version__, "python": platform.python_version()},
        "log": logs,
    }
    (out / "train.json").write_text(json.dumps(record, indent=1))
    print(f"saved to {out} after {fmt_time(seconds)} ({step} steps)", flush=True)
    return record


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out", required=True, help="directory for the weights, toy.json and train.json")
    p.add_argument(
        "--variant",
        default="text",
        choices=MODEL_VARIANTS,
        help="text / image: the binding task; window: the toy window task (kamera.toy.window_task)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop early after this many minutes (0 = no cap)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--queries", type=int, default=8, help="queries packed after B per training sequence")
    p.add_argument(
        "--b-only",
        type=int,
        default=8,
        help="B-only sequences (prefix, B, control_b queries) per step, so a B read stands without A",
    )
    p.add_argument(
        "--factorized-init",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start compound embeddings at object + colour (text variant)",
    )
    p.add_argument(
        "--freeze-patch-embed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the vision patch embedding at its random init (image variant)",
    )
    p.add_argument(
        "--attn-hint",
        type=float,
        default=1.0,
        help="weight of the layer-1 attention hint at B-reading queries (0 = off)",
    )
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-items", type=int, default=256, help="held-out items per query kind")
    defaults = TaskSpec()
    p.add_argument("--n-objects", type=int, default=defaults.n_objects)
    p.add_argument("--n-colours", type=int, default=defaults.n_colours)
    p.add_argument("--n-locations", type=int, default=defaults.n_locations)
    p.add_argument(
        "--n-entries",
        type=int,
        default=None,
        help=f"entries a world binds (default {defaults.n_entries}; window: bindings in front of a scene, "
        f"default {WindowSpec().n_entries})",
    )
    p.add_argument("--min-entries", type=int, default=2, help="training worlds bind min..cap entries (drawn per step)")
    p.add_argument(
        "--ramp",
        type=float,
        default=0.4,
        help="fraction of training over which the cap grows from --min-entries to --n-entries",
    )
    window = WindowSpec()
    p.add_argument("--per-state", type=int, default=window.per_state, help="window: bindings per state chunk")
    p.add_argument("--window", type=int, default=window.window, help="window: state chunks of a recall window (k)")
    p.add_argument("--max-after", type=int, default=window.max_after, help="window: most state chunks after a scene")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv`` (default: the command line) and train; the command is recorded in train.json."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return train(parser().parse_args(argv), "python -m kamera.toy.train " + " ".join(shlex.quote(a) for a in argv))


if __name__ == "__main__":
    main()
