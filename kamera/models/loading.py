"""Loading a paper checkpoint the way a cluster job does: no torchvision, no remote code, no network.

- weights through the family's own transformers class (``from_pretrained``), on one device or spread
  over the visible GPUs by accelerate (``device="auto"`` → ``device_map="auto"``);
- the tokenizer through ``AutoTokenizer`` and the image processor through its PIL backend
  (``AutoImageProcessor.from_pretrained(..., backend="pil")``), both from the checkpoint's files: the
  processor classes that bundle a video processor need torchvision, so they are not built;
- the chat framing (header before the item, footer after the question) read off the checkpoint's
  own chat template, and the video frame budget off its (video) preprocessor config;
- ``attn_implementation="auto"``: flash-attention 2 on CUDA when installed, else sdpa.

Precision: a checkpoint stored in bf16 and asked for in float32 is loaded at its stored precision and
every module except the vocabulary matrices (input embeddings, LM head) is upcast. That is exactly an
fp32 model (the embeddings' rows are gathered and upcast, the head is applied in float32 by
:meth:`Adapter.logits`), at half the memory of the two largest matrices.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
from pathlib import Path

import torch
import transformers as tf

from kamera.models.base import Adapter
from kamera.models.entry import ModelEntry
from kamera.models.weights import CheckpointWeightsError, loading_problem

log = logging.getLogger(__name__)

ATTENTION = ("sdpa", "eager", "flash_attention_2")
SENTINEL = "KAMERASENTINEL"  # a plain word every template passes through unchanged


def resolve_device(device: str) -> str:
    """"cpu", "cuda[:i]" (checked to exist) or "auto" (kept only when CUDA is there, else "cpu")."""
    if device == "auto":
        return "auto" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available on this machine (use device=cpu or auto)")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ValueError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return device
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:<i>' or 'auto', got {device!r}")


def resolve_attention(impl: str, device: str) -> str:
    """The attention kernel to load: ``impl``, or for "auto" flash-attention 2 on CUDA when installed."""
    from transformers.utils import is_flash_attn_2_available

    if impl == "auto":
        return "flash_attention_2" if device != "cpu" and is_flash_attn_2_available() else "sdpa"
    if impl not in ATTENTION:
        raise ValueError(f"attn_implementation must be one of {(*ATTENTION, 'auto')}, got {impl!r}")
    if impl == "flash_attention_2" and (device == "cpu" or not is_flash_attn_2_available()):
        raise ValueError(
            "attn_implementation=flash_attention_2 needs CUDA and the flash-attn package (pip install -e '.[gpu]')"
        )
    return impl


def read_json(path: Path) -> dict:
    """A checkpoint's JSON file, or {} when absent; ValueError naming the file when it is corrupt."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def is_gguf(ckpt: str | Path) -> bool:
    """Whether a checkpoint is one GGUF file rather than a transformers directory."""
    return Path(ckpt).suffix == ".gguf" and Path(ckpt).is_file()


def gguf_config(path: Path) -> dict:
    """The transformers config a GGUF file's metadata gives (``model_type`` from ``general.architecture``, the
    sizes from its ``<arch>.*`` keys), read by transformers' own GGUF reader without dequantising any tensor
    (``transformers/modeling_gguf_pytorch_utils.py:load_gguf_checkpoint``). ValueError naming the file when the
    ``gguf`` package is missing or the file is not a GGUF transformers can read."""
    try:
        import gguf  # noqa: F401  (transformers' reader needs it; say so here rather than deep in a load)
    except ImportError as err:
        raise ValueError(f"{path}: reading a GGUF checkpoint needs the gguf package (pip install gguf)") from err
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        return dict(load_gguf_checkpoint(str(path), return_tensors=False)["config"])
    except Exception as err:  # a truncated file, another magic, an architecture transformers cannot map
        raise ValueError(f"{path}: not a GGUF checkpoint transformers can read ({type(err).__name__}: {err})") from err


def checkpoint_config(ckpt: str | Path) -> dict:
    """The checkpoint's config: config.json, or a GGUF file's metadata (:func:`gguf_config`)."""
    return gguf_config(Path(ckpt)) if is_gguf(ckpt) else read_json(Path(ckpt) / "config.json")


def checkpoint_model_type(ckpt: str | Path) -> str | None:
    """The ``model_type`` a checkpoint's config states (None when it states none); ValueError naming the
    file when it is not valid JSON (or not a readable GGUF)."""
    kind = checkpoint_config(ckpt).get("model_type")
    return kind if isinstance(kind, str) and kind else None


def stored_dtype(ckpt: Path) -> torch.dtype | None:
    """The dtype the checkpoint's weights are stored in, as its config.json states it (None if unstated)."""
    cfg = read_json(ckpt / "config.json")
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    for sub in ("text_config", "thinker_config", "llm_config"):
        name = name or (cfg.get(sub) or {}).get("torch_dtype") or (cfg.get(sub) or {}).get("dtype")
    return (
        getattr(torch, name) if isinstance(name, str) and isinstance(getattr(torch, name, None), torch.dtype) else None
    )


def upcast_except_vocab(adapter: Adapter, dtype: torch.dtype) -> None:
    """Cast every parameter and floating buffer of the model to ``dtype`` except the input embeddings and the
    LM head (which stay at their stored precision; see the module docstring for why this is exact)."""
    keep = {id(adapter.lm.get_input_embeddings()), id(adapter.head)}
    for module in adapter.model.modules():
        if id(module) in keep:
            continue
        for name, p in module.named_parameters(recurse=False):
            if p.dtype != dtype and p.is_floating_point():
                setattr(module, name, torch.nn.Parameter(p.detach().to(dtype), requires_grad=False))
        for name, b in module.named_buffers(recurse=False):
            if (
                b.is_floating_point()
                and b.dtype != dtype
                and b.element_size() < torch.empty((), dtype=dtype).element_size()
            ):
                module.register_buffer(name, b.to(dtype), persistent=name not in module._non_persistent_buffers_set)


CHAT_CONTENT = ("parts", "string")  # how a template takes a message's content: a list of typed parts, or one string


def _render(tokenizer, content: str) -> str | None:
    """The template rendered for one user message, its content as ``content`` says (None when it fails, or
    renders the parts list's Python form instead of reading it)."""
    body = [{"type": "text", "text": SENTINEL}] if content == "parts" else SENTINEL
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": body}], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # jinja raises TypeError, UndefinedError, TemplateError … for a content shape it does not take
        return None
    if not isinstance(text, str) or text.count(SENTINEL) != 1:
        return None
    if content == "parts" and "'type'" in text.partition(SENTINEL)[0][-40:]:
        return None  # {{ message['content'] }} printed the list: the template takes a string
    return text


def chat_with_content(tokenizer, where: str) -> tuple[tuple[str, str], str]:
    """(header, footer) of a single-turn user message as the checkpoint's chat template renders it, and how the
    template took the content: ``"parts"`` (a list of typed parts, as the VL templates read it) or, when it fails
    on that or prints the list as text, ``"string"`` (one string, as most text models' templates read it).

    The template is rendered for one user text (a sentinel) with the generation prompt; what precedes
    the sentinel is the header (it goes into the prefix span), what follows is the footer (it closes
    the query). A tokenizer that adds a BOS token when it encodes a prompt gets it at the start of the
    header, as the family's processor would tokenize the rendered prompt.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{where}: the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json); "
            "model.chat=none runs it without one"
        )
    for content in CHAT_CONTENT:
        text = _render(tokenizer, content)
        if text is not None:
            break
    else:
        raise ValueError(
            f"{where}: the chat template renders a user text exactly once neither as a list of parts nor as a string"
        )
    if content != "parts":
        log.info("%s: the chat template takes message content as a string (not a list of parts)", where)
    header, _, footer = text.partition(SENTINEL)
    bos = tokenizer.bos_token
    with_special = tokenizer(SENTINEL, add_special_tokens=True)["input_ids"]
    if bos and with_special[:1] == [tokenizer.bos_token_id] and not header.startswith(bos):
        header = bos + header
    return (header, footer), content


CHAT_MODES = ("template", "none")  # model.chat: wrap items in the checkpoint's chat template, or in nothing


def has_chat_template(ckpt: Path) -> bool:
    """Whether a checkpoint ships a chat template (chat_template.jinja / .json, tokenizer_config.json's
    ``chat_template``, or a GGUF file's ``tokenizer.chat_template``), read without building the tokenizer."""
    if is_gguf(ckpt):
        import gguf

        return "tokenizer.chat_template" in gguf.GGUFReader(str(ckpt)).fields
    if (ckpt / "chat_template.jinja").is_file() or (ckpt / "chat_template.json").is_file():
        return True
    return bool(read_json(ckpt / "tokenizer_config.json").get("chat_template"))


def plain_chat(tokenizer) -> tuple[str, str] | None:
    """``model.chat=none``: no template; only the BOS token the tokenizer itself adds when it encodes a prompt
    (as it would with the raw text), so a base model reads ``[BOS] prefix A B query``."""
    bos = tokenizer.bos_token
    if bos and tokenizer("x", add_special_tokens=True)["input_ids"][:1] == [tokenizer.bos_token_id]:
        return bos, ""
    return None


def chat_from_template(tokenizer, where: str) -> tuple[str, str]:
    """(header, footer) of a single-turn user message (:func:`chat_with_content`, without how it was rendered)."""
    return chat_with_content(tokenizer, where)[0]


def video_pixels(ckpt: Path) -> tuple[int, int] | None:
    """(min, max) pixels per video frame from the checkpoint's video preprocessor config, else from its
    image preprocessor config (the order transformers' video processors read them in)."""
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        cfg = read_json(ckpt / name)
        size = cfg.get("size") or {}
        lo = cfg.get("min_pixels") or size.get("shortest_edge")
        hi = cfg.get("max_pixels") or size.get("longest_edge")
        if lo and hi:
            return int(lo), int(hi)
    return None


def load_native(
    e: ModelEntry, ckpt: Path, *, dtype: torch.dtype, device: str, attn_implementation: str, chat: str = "template"
) -> Adapter:
    """A paper checkpoint through its native transformers class, wrapped in the family adapter; ``chat``
    "template" wraps items in the checkpoint's chat template, "none" in nothing (:func:`plain_chat`)."""
    cls = getattr(tf, e.model_class)
    stored = stored_dtype(ckpt)
    widen = stored is not None and stored.is_floating_point and torch.finfo(stored).bits < torch.finfo(dtype).bits
    # a GGUF file holds config, tokenizer and (dequantised on load) weights: transformers reads it by directory + name
    where, gguf = (ckpt.parent, {"gguf_file": ckpt.name}) if is_gguf(ckpt) else (ckpt, {})
    model, info = cls.from_pretrained(
        where,
        dtype=stored if widen else dtype,
        attn_implementation=attn_implementation,
        device_map=device,
        output_loading_info=True,
        ignore_mismatched_sizes=True,  # reported below, with the missing and unexpected tensors, in one line
        **gguf,
        **dict(e.load_kwargs),
    )
    if problem := loading_problem(info, f"{e.name}: {ckpt}", e.model_class):
        raise CheckpointWeightsError(problem)  # never a run on weights initialised at random
    if e.submodule:
        model = getattr(model, e.submodule)
    tokenizer = tf.AutoTokenizer.from_pretrained(where, **gguf)
    # a text decoder has no image processor to build
    image_processor = tf.AutoImageProcessor.from_pretrained(ckpt, backend="pil") if e.reads_images else None
    adapter = e.adapter(model, tokenizer, image_processor, name=e.name)
    if widen:
        upcast_except_vocab(adapter, dtype)
    adapter.checkpoint = ckpt
    if chat == "none":
        adapter.chat, adapter.chat_content = plain_chat(tokenizer), "none"
    else:
        adapter.chat, adapter.chat_content = chat_with_content(tokenizer, str(ckpt))
    adapter.video_pixels = video_pixels(ckpt)
    log.info(
        "%s: loaded %s from %s (%s, %s, attention %s)", e.name, e.model_class, ckpt, dtype, device, attn_implementation
    )
    return adapter


def peak_memory_bytes() -> int:
    """Peak memory of this process so far: the summed CUDA peak over visible GPUs when CUDA is in use,
    else the peak resident set size."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024
