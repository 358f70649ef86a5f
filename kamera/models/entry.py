"""One registered model: what it is, how it loads, and how its shaped checkpoint is written.

Each entry is declared in ``conf/model/<name>.yaml`` (its ``entry`` node, one key per field below, references as
``"module:name"`` strings); :mod:`kamera.models.registry` reads the files. Kept apart from the registry so that
modules that only need the type (the shaped writers, the loaders) import nothing that reads files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kamera.models.base import Adapter


@dataclass(frozen=True)
class ModelEntry:
    """A registered model.

    Three kinds (:attr:`kind`): ``tiny`` (random weights from ``tiny_config``, CPU tests), ``toy``
    (trained weights shipped in the package, ``weights``) and ``paper`` (a local checkpoint named as on
    the Hub, ``hf_id``). A paper model loads either through the native path (``adapter`` +
    ``model_class``: transformers' own class, tokenizer and PIL image processor from the checkpoint) or
    through its own ``loader``.

    In ``conf/model``, ``adapter``, ``tiny_config`` and ``image_processor`` are ``"module:name"`` references,
    resolved when the file is read; ``chat`` is a two-string list and ``load_kwargs`` a mapping.
    ``loader`` and ``shaped`` stay ``"module:function"`` references, resolved only when used:

    - ``loader(path: Path, *, dtype: torch.dtype, device: str, attn_implementation: str) -> Adapter``
      with ``path`` the checkpoint directory (paper) or the shipped weights directory (toy);
    - ``shaped(model: str, sources: dict[str, str]) -> ShapedSpec`` is the model's family's shaped-checkpoint spec
      (:mod:`kamera.models.shaped.writer`): it reads the model's published config
      (``kamera/models/shaped/configs/<model>.json``) and takes ``shaped_sources`` (a mapping in the file: where each
      published file's numbers were checked), so a paper model of a family with a writer is its YAML and its config.

    ``chat`` is a fixed (header, footer) for tiny models, whose byte tokenizer has no chat template;
    paper checkpoints read theirs from the checkpoint's template at load time.
    ``load_kwargs`` are extra ``from_pretrained`` arguments and ``submodule`` the attribute of the
    loaded model that the adapter wraps (Qwen3-Omni: the thinker of the full model).

    ``from_checkpoint`` marks the one entry (``conf/model/hf.yaml``) whose family is not declared but read from
    the checkpoint given as ``model.path`` (its ``config.json`` ``model_type``): it is a checkpoint-backed
    (``paper``) entry whose adapter and class :func:`kamera.models.checkpoints.own_entry` chooses per checkpoint.
    ``by_path: false`` keeps the entry's family out of what ``model=hf`` serves (its file says why): by default a
    checkpoint of the family of any natively loading entry is served
    (:func:`kamera.models.checkpoints.served_families`).
    """

    name: str
    family: str
    attention: str
    adapter: type[Adapter] | None = None
    model_class: str = ""
    tiny_config: Callable[[], object] | None = None
    image_processor: Callable[[], object] | None = None
    hf_id: str | None = None
    remote_code: bool = False
    chat: tuple[str, str] | None = None
    notes: str = ""
    loader: str | None = None
    weights: str | None = None
    shaped: str | None = None
    shaped_sources: tuple[tuple[str, str], ...] = ()
    load_kwargs: tuple[tuple[str, object], ...] = ()
    submodule: str | None = None
    from_checkpoint: bool = False
    by_path: bool = True

    @property
    def kind(self) -> str:
        """ "tiny" (random, from a config), "toy" (shipped trained weights) or "paper" (local checkpoint)."""
        if self.tiny_config is not None:
            return "tiny"
        return "toy" if self.weights is not None else "paper"

    @property
    def has_adapter(self) -> bool:
        """Whether the harness can load this model (a native adapter or a loader of its own)."""
        return self.kind != "paper" or self.adapter is not None or self.loader is not None or self.from_checkpoint

    @property
    def reads_images(self) -> bool:
        """Whether the model takes image (and video) parts: its adapter has a vision path
        (:attr:`Adapter.reads_images`); a toy model (a loader, no adapter) unless its family is plain text."""
        return self.adapter.reads_images if self.adapter is not None else self.family != "text"

    @property
    def repo_dir(self) -> str:
        """The checkpoint's directory name under the models root (the Hub repo name)."""
        if self.hf_id is None:
            raise ValueError(f"{self.name} is not a checkpoint-backed model")
        return self.hf_id.split("/")[-1]


def resolve(ref: str, what: str) -> Callable:
    """The function a ``"module:function"`` reference names; ValueError naming the reference otherwise."""
    import importlib

    module, sep, func = ref.partition(":")
    if not sep or not module or not func:
        raise ValueError(f"{what} {ref!r} must look like 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what} {ref!r} cannot be resolved: {e}") from e
    if not callable(fn):
        raise ValueError(f"{what} {ref!r} is not callable")
    return fn
