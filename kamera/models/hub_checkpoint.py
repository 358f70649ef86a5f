"""Hub-layout safetensors checkpoints, read into native modules by an explicit weight plan.

Remote-code checkpoints (Kimi-VL, Phi-3.5-V, InternVL-Chat) keep their own tensor names; we load them into
native transformers modules through a :class:`Load` plan: each native parameter names the checkpoint
tensors it is built from and how. Before any weight is read the plan is checked against the shard
headers (names and shapes, via meta tensors) and against the model's own parameter list, so a
renamed, missing, extra or mis-shaped tensor fails naming it, and every checkpoint tensor is either
loaded or named, with a reason, in the model's ignore list. Their loaders share what comes before the
model-specific part (:func:`open_remote`: config.json, native config, image processor, shard headers)
and the load itself (:meth:`RemoteCheckpoint.load`).

Layout (as ``save_pretrained`` writes it): ``model.safetensors``, or ``model-0000k-of-0000n.safetensors``
shards plus ``model.safetensors.index.json`` (``{"metadata": {"total_size"}, "weight_map": {name: shard}}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import torch
from safetensors import safe_open
from transformers.initialization import no_init_weights

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
C = TypeVar("C")  # a native transformers config
P = TypeVar("P")  # an image processor with ``from_dict(preprocessor_config.json)``


class CheckpointMismatchError(ValueError):
    """A checkpoint that does not match the native model it is being loaded into."""


def read_json(path: Path) -> dict:
    """A JSON file of a checkpoint directory; a missing or corrupt file names itself."""
    if not path.is_file():
        raise CheckpointMismatchError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointMismatchError(f"{path} is not valid JSON: {err}") from err


@dataclass
class HubCheckpoint:
    """The tensors of one checkpoint directory: name → shard, shapes from the headers (no weight read)."""

    path: Path
    weight_map: dict[str, str]
    shapes: dict[str, tuple[int, ...]]

    @classmethod
    def open(cls, path: str | Path) -> HubCheckpoint:
        """Read the index (or the single file) and every shard header; the two must agree name for name."""
        path = Path(path)
        if (path / INDEX).is_file():
            weight_map = read_json(path / INDEX).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointMismatchError(f"{path / INDEX} has no weight_map")
        elif (path / SINGLE).is_file():
            weight_map = None
        else:
            raise CheckpointMismatchError(f"{path}: neither {INDEX} nor {SINGLE} found")
        shards = sorted(set(weight_map.values())) if weight_map else [SINGLE]
        shapes: dict[str, tuple[int, ...]] = {}
        found: dict[str, str] = {}
        for shard in shards:
            file = path / shard
            if not file.is_file():
                raise CheckpointMismatchError(f"{path}: shard {shard} named by {INDEX} is missing")
            try:
                with safe_open(str(file), "pt") as f:
                    for name in f.keys():
                        shapes[name] = tuple(f.get_slice(name).get_shape())
                        found[name] = shard
            except Exception as err:  # a truncated or foreign file: say which
                raise CheckpointMismatchError(f"{file}: not a readable safetensors file ({err})") from err
        if weight_map is not None and weight_map != found:
            diff = sorted(set(weight_map.items()) ^ set(found.items()))[:5]
            raise CheckpointMismatchError(
                f"{path / INDEX} does not match the shard headers (index entry vs header, first differences: {diff})"
            )
        return cls(path, found, shapes)

    @property
    def names(self) -> set[str]:
        return set(self.weight_map)


@dataclass(frozen=True)
class Load:
    """One native tensor built from checkpoint tensors.

    ``parts[i]`` is a tuple of checkpoint names concatenated along dim 0; with several parts the
    results are stacked along a new dim 0 (MoE experts). ``transform`` maps the result to the native
    layout (a row slice, a permutation); it must work on meta tensors so shapes check before reading.
    """

    target: str
    parts: tuple[tuple[str, ...], ...]
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None

    @classmethod
    def copy(cls, target: str, source: str, transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Load:
        return cls(target, ((source,),), transform)

    @property
    def sources(self) -> list[str]:
        return [s for part in self.parts for s in part]

    def build(self, get: Callable[[str], torch.Tensor]) -> torch.Tensor:
        """The tensor for one part (``get`` reads or fakes a checkpoint tensor)."""
        return self._finish(
            [torch.cat([get(s) for s in part]) if len(part) > 1 else get(part[0]) for part in self.parts]
        )

    def _finish(self, parts: list[torch.Tensor]) -> torch.Tensor:
        out = torch.stack(parts) if len(parts) > 1 else parts[0]
        return self.transform(out) if self.transform is not None else out


@dataclass(frozen=True)
class Ignored:
    """Checkpoint tensors deliberately not loaded: a full-match regex and the reason."""

    pattern: str
    reason: str

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, name) is not None


@dataclass
class WeightPlan:
    """The whole mapping of one checkpoint onto one native model."""

    loads: list[Load]
    ignored: list[Ignored] = field(default_factory=list)

    def check(self, ckpt: HubCheckpoint, model: torch.nn.Module) -> None:
        """Names and shapes of the plan against the checkpoint headers and the model; nothing is read."""
        have = ckpt.names
        missing = [s for load in self.loads for s in load.sources if s not in have]
        if missing:
            used = {s for load in self.loads for s in load.sources}
            strays = sorted(n for n in have - used if not any(i.matches(n) for i in self.ignored))
            hint = f"; unmapped checkpoint tensors: {strays[:5]}" if strays else ""
            raise CheckpointMismatchError(
                f"{ckpt.path}: tensor {missing[0]!r} is missing ({len(missing)} missing in all){hint}"
            )
        used = {s for load in self.loads for s in load.sources}
        unknown = sorted(n for n in have - used if not any(i.matches(n) for i in self.ignored))
        if unknown:
            raise CheckpointMismatchError(
                f"{ckpt.path}: tensor {unknown[0]!r} is neither loaded nor in the ignore list "
                f"({len(unknown)} such tensors: {unknown[:5]})"
            )
        targets = native_tensors(model)
        planned = [load.target for load in self.loads]
        dupes = {t for t in planned if planned.count(t) > 1}
        if dupes:
            raise CheckpointMismatchError(f"weight plan loads {sorted(dupes)[:3]} twice")
        unplanned = sorted(set(targets) - set(planned))
        if unplanned:
            raise CheckpointMismatchError(
                f"native tensor {unplanned[0]!r} has no source in {ckpt.path} ({unplanned[:5]})"
            )
        for load in self.loads:
            if load.target not in targets:
                raise CheckpointMismatchError(
                    f"weight plan names {load.target!r}, which the native model does not have"
                )
            shape = tuple(load.build(lambda s: torch.empty(ckpt.shapes[s], device="meta")).shape)
            if shape != tuple(targets[load.target].shape):
                raise CheckpointMismatchError(
                    f"{ckpt.path}: {load.sources[0]!r} gives {load.target} the shape {shape}, "
                    f"the native model needs {tuple(targets[load.target].shape)}"
                )

    def apply(self, ckpt: HubCheckpoint, model: torch.nn.Module) -> None:
        """Check, then copy every planned tensor into the model (in the parameter's own dtype).

        Loads run in shard order and each shard is closed after its last use, so at most the shards of
        one load are mapped at a time (the resident set stays near the model's own size)."""
        self.check(ckpt, model)
        targets = native_tensors(model)
        order = sorted(self.loads, key=lambda ld: min(ckpt.weight_map[s] for s in ld.sources))
        last_use = {ckpt.weight_map[s]: i for i, ld in enumerate(order) for s in ld.sources}
        with ExitStack() as stack:
            files: dict[str, ExitStack] = {}
            handles: dict[str, object] = {}

            def get(name: str) -> torch.Tensor:
                shard = ckpt.weight_map[name]
                if shard not in handles:
                    files[shard] = stack.enter_context(ExitStack())
                    handles[shard] = files[shard].enter_context(safe_open(str(ckpt.path / shard), "pt"))
                return handles[shard].get_tensor(name)

            for i, load in enumerate(order):
                dest = targets[load.target]
                with torch.no_grad():
                    if len(load.parts) > 1 and load.transform is None:
                        for k, part in enumerate(load.parts):  # stack into place: no second copy of the experts
                            dest[k].copy_(torch.cat([get(s) for s in part]) if len(part) > 1 else get(part[0]))
                    else:
                        dest.copy_(load.build(get))
                for shard in [s for s, last in last_use.items() if last == i and s in handles]:
                    files.pop(shard).close()
                    del handles[shard]


def check_specials(tokenizer, specials: dict[str, int], path: Path) -> None:
    """Every special token an adapter writes must be one token at the model's id."""
    for token, want in specials.items():
        got = tokenizer.convert_tokens_to_ids(token)
        if got != want:
            raise CheckpointMismatchError(f"{path}: tokenizer maps {token} to {got}, the model uses id {want}")


def native_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and persistent buffers of ``model`` by state-dict name (what a checkpoint must fill)."""
    out = dict(model.named_parameters())
    persistent = set(model.state_dict())
    out.update({n: b for n, b in model.named_buffers() if n in persistent})
    return out


def build_empty(cls, config, dtype: torch.dtype, attn_implementation: str) -> torch.nn.Module:
    """A native model of ``config`` with allocated but uninitialised weights (the plan fills them all)."""
    with no_init_weights():
        return cls._from_config(config, dtype=dtype, attn_implementation=attn_implementation)


@dataclass
class RemoteCheckpoint(Generic[C, P]):
    """What every remote-code loader reads before it builds its model (:func:`open_remote`)."""

    path: Path
    hub: dict  # config.json as published (remote code's own fields)
    config: C  # the native config ``native_config(hub)`` made of it
    processor: P  # the image processor of preprocessor_config.json
    ckpt: HubCheckpoint  # the shard headers

    def load(self, build: Callable[[], torch.nn.Module], plan: WeightPlan, device: str) -> torch.nn.Module:
        """``build()`` (empty native modules) on ``device``, filled by ``plan`` from the checkpoint."""
        with torch.device(device):
            model = build()
        plan.apply(self.ckpt, model)
        return model


def open_remote(
    path: str | Path,
    native_config: Callable[[dict], C],
    processor_cls: type[P],
    check: Callable[[Path, dict, P], None] | None = None,
) -> RemoteCheckpoint[C, P]:
    """The loader prologue of a remote-code checkpoint directory, in this order, each step failing by itself:
    config.json, its native config (a field the native classes do not implement raises), the image processor
    (``processor_cls.from_dict``) of preprocessor_config.json, ``check(path, hub, processor)`` where the two
    files must agree, then the shard headers (:meth:`HubCheckpoint.open`)."""
    path = Path(path)
    hub = read_json(path / "config.json")
    config = native_config(hub)
    processor = processor_cls.from_dict(read_json(path / "preprocessor_config.json"))
    if check is not None:
        check(path, hub, processor)
    return RemoteCheckpoint(path, hub, config, processor, HubCheckpoint.open(path))
