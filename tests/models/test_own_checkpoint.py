"""Your own checkpoint (issue 23, items 1-4): ``model=hf model.path=<dir>`` reads the family from config.json's
``model_type`` and loads it with the adapter that serves it; a path is honoured or refused on every model before
any weights load; text-only checkpoints need no image processor and refuse image benchmarks in preflight; chat
templates that take content only as a string work. Tiny random checkpoints written by ``save_pretrained``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers as tf
from shaped_fixtures import shaped_marks

from kamera.data import make_fixture
from kamera.job import checkpoint_fingerprint, preflight
from kamera.job.identity import config_key
from kamera.models import UnsupportedCheckpointError, entry, load_model, model_problems, own_entry
from kamera.models.checkpoints import served_families, supported_model_types
from kamera.models.families import TEXT_DECODER_TYPES
from kamera.models.loading import chat_with_content
from kamera.models.standin_tokenizer import standin_tokenizer, write_standin_tokenizer
from kamera.run import runner
from kamera.sweep import compose_config

REPO = Path(__file__).resolve().parents[2]
TOKENIZERS = Path(os.environ.get("KAMERA_TOKENIZERS", REPO.parent / "shared" / "tokenizers"))
ARMS = "arms=[reprefill,blind,patch_r8,patch_full,cacheblend]"  # the command line

# content as a list of typed parts (the VL templates) and as one string (most text models' templates)
PARTS = ("{% for m in messages %}<|{{ m['role'] }}|>\n{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{{ '\\n' }}"
         "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
STRING = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CONCAT = (
    "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] + ' [/INST]' }}{% endfor %}"  # TypeError on a list
)
STARTS = (
    "{% for m in messages %}{% if m['content'].startswith('/') %}cmd{% endif %}<u>{{ m['content'] }}</u>{% endfor %}"
)

TEXT = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    initializer_range=0.2,
)  # wide enough weights that blind reuse moves the answer (KL above eta_floor)


def text_checkpoint(out: Path, model_type: str, template: str = STRING, seed: int = 0, **config) -> Path:
    """A 2-layer random text decoder of ``model_type`` saved with save_pretrained, with a stand-in tokenizer."""
    torch.manual_seed(seed)
    cfg = tf.AutoConfig.for_model(model_type, **{**TEXT, **config})
    tf.AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    write_standin_tokenizer(
        out,
        cfg.vocab_size,
        {"<pad>": 0, "<s>": 1, "</s>": 2},
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=template,
    )
    return out


def twin_checkpoint(out: Path, twin: str, seed: int = 0) -> Path:
    """A checkpoint of a registered tiny twin's family (its config, random weights, its image processor)."""
    e = entry(twin)
    torch.manual_seed(seed)
    model = getattr(tf, e.model_class)._from_config(e.tiny_config(), dtype=torch.float32)
    model.save_pretrained(out)
    if e.image_processor:
        e.image_processor().save_pretrained(out)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    write_standin_tokenizer(
        out,
        vocab,
        {"<pad>": 0, "<s>": 1, "</s>": 2},
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=PARTS,
    )
    return out


@pytest.fixture(scope="module")
def musique(tmp_path_factory) -> Path:
    return make_fixture("musique", tmp_path_factory.mktemp("data") / "MuSiQue")


def job(tmp_path: Path, *overrides: str):
    return compose_config(
        [
            f"paths.results={tmp_path}/raw",
            f"paths.outputs={tmp_path}/out",
            "model.dtype=float32",
            "device=cpu",
            *overrides,
        ]
    )


def hf_job(tmp_path: Path, ckpt: Path, musique: Path, *overrides: str):
    return job(
        tmp_path,
        "model=hf",
        f"model.path={ckpt}",
        "bench=musique",
        f"bench.root={musique}",
        ARMS,
        "n_items=2",
        *overrides,
    )


def check_identities(rows: pd.DataFrame) -> None:
    """Re-prefill is the reference (KL 0), blind reuse moves the answer, the full-rank patch restores it."""
    by = rows.set_index(["item_id", "arm"])
    for item in rows.item_id.unique():
        assert by.at[(item, "reprefill"), "kl"] == pytest.approx(0.0, abs=1e-9)
        assert by.at[(item, "blind"), "kl"] > 1e-4
        assert by.at[(item, "patch_full"), "eta"] >= 0.999
        assert by.at[(item, "patch_full"), "kl"] < 1e-6 * by.at[(item, "blind"), "kl"] + 1e-9


# ----- item 1: model=hf model.path=DIR --------------------------------------------------------------------
@pytest.mark.parametrize("model_type", TEXT_DECODER_TYPES)
def test_a_text_checkpoint_runs_by_path_with_full_rank_equal_to_reprefill(tmp_path, musique, model_type):
    ckpt = text_checkpoint(tmp_path / f"my-{model_type}", model_type)
    rows = pd.read_parquet(runner.run(hf_job(tmp_path, ckpt, musique)))
    assert set(rows.arm) == {"reprefill", "blind", "patch_r8", "patch_full", "cacheblend"} and len(rows) == 10
    assert set(rows.model) == {"hf"} and set(rows.family) == {model_type} and set(rows.model_type) == {model_type}
    assert set(rows.checkpoint) == {f"my-{model_type}"} and set(rows.attention) == {"GQA"}
    check_identities(rows)


# a checkpoint of every family whose served entry is a tiny twin, and of three with a paper model too
TWINS = sorted(
    {e.name for e in served_families().values() if e.kind == "tiny"}
    | {"tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_llava", "tiny_gdn_hybrid"}
)


@pytest.mark.parametrize("twin", TWINS)
def test_a_checkpoint_of_a_served_family_runs_by_path(tmp_path, musique, twin):
    ckpt = twin_checkpoint(tmp_path / twin, twin)
    bench = "synthetic" if entry(twin).reads_images else "musique"
    where = [f"bench.root={musique}"] if bench == "musique" else []
    cfg = job(
        tmp_path,
        "model=hf",
        f"model.path={ckpt}",
        f"bench={bench}",
        *where,
        "arms=[reprefill,blind,patch_full]",
        "n_items=2",
        "eta_floor=0",
    )
    rows = pd.read_parquet(runner.run(cfg))
    family = entry(twin).family
    assert set(rows.family) == {family} and set(rows.model_type) == {family}
    by = rows.set_index(["item_id", "arm"])
    for item in rows.item_id.unique():
        assert by.at[(item, "reprefill"), "kl"] == pytest.approx(0.0, abs=1e-9)
        assert by.at[(item, "patch_full"), "kl"] <= 1e-5 * max(by.at[(item, "blind"), "kl"], 1e-3)


def test_label_names_the_model_in_rows(tmp_path, musique):
    ckpt = text_checkpoint(tmp_path / "ckpt", "llama")
    rows = pd.read_parquet(runner.run(hf_job(tmp_path, ckpt, musique, "model.label=my_llama", "arms=[blind]")))
    assert set(rows.model) == {"my_llama"} and set(rows.checkpoint) == {"ckpt"}


def test_an_unsupported_or_missing_checkpoint_is_one_preflight_line(tmp_path, musique, monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    gpt2 = tmp_path / "gpt2"
    tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)).save_pretrained(gpt2)
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, says in ((gpt2, "model_type 'gpt2'"), (empty, "config.json missing")):
        (line,) = [p for p in preflight(hf_job(tmp_path, path, musique)) if "hf:" in p]
        assert says in line and ", ".join(supported_model_types()) in line and "\n" not in line
        with pytest.raises(Exception, match="cannot start"):
            runner.run(hf_job(tmp_path, path, musique))
    assert any(
        "model.path is required" in p
        for p in preflight(job(tmp_path, "model=hf", "bench=musique", f"bench.root={musique}"))
    )


def test_the_job_key_fingerprints_the_checkpoint(tmp_path, musique):
    a, b = text_checkpoint(tmp_path / "a", "llama"), text_checkpoint(tmp_path / "b", "llama", num_hidden_layers=1)
    copy = shutil.copytree(a, tmp_path / "copy")
    prints = {p.name: checkpoint_fingerprint(hf_job(tmp_path, p, musique)) for p in (a, b, copy)}
    assert prints["a"] == prints["copy"] != prints["b"] and prints["a"].startswith("checkpoint:")


# ----- item 2: model.path honoured or refused everywhere --------------------------------------------------
@pytest.mark.parametrize("model", ["toy_binding_text", "toy_binding", "tiny_qwen2_5_vl"])
def test_a_path_on_a_built_in_model_is_refused_before_weights(tmp_path, model):
    ckpt = text_checkpoint(tmp_path / "ckpt", "qwen2")
    (line,) = model_problems(model, str(ckpt))
    assert f"model.path={ckpt}" in line and "model=hf" in line
    cfg = job(tmp_path, f"model={model}", f"model.path={ckpt}", "arms=[blind]", "n_items=1")
    assert line in preflight(cfg)
    with pytest.raises(ValueError, match="loads no checkpoint"):
        load_model(model, path=ckpt)


def test_a_checkpoint_of_another_family_is_refused_before_weights(tmp_path, musique, monkeypatch):
    ckpt = text_checkpoint(tmp_path / "llama", "llama")
    monkeypatch.setattr(
        tf.LlavaForConditionalGeneration,
        "from_pretrained",
        classmethod(lambda *a, **k: pytest.fail("a default-size LLaVA was built")),
    )
    (line,) = model_problems("llava_1_5_7b", ckpt)
    assert "model_type 'llama', not 'llava'" in line and f"model=hf model.path={ckpt}" in line
    assert line in preflight(
        job(
            tmp_path,
            "model=llava_1_5_7b",
            f"model.path={ckpt}",
            "bench=musique",
            f"bench.root={musique}",
            "arms=[blind]",
            "n_items=1",
        )
    )
    with pytest.raises(UnsupportedCheckpointError, match="not 'llava'"):
        load_model("llava_1_5_7b", path=ckpt)


# ----- item 3: text-only checkpoints ------------------------------------------------------------------------
def test_a_text_checkpoint_loads_without_an_image_processor(tmp_path):
    ckpt = text_checkpoint(tmp_path / "ckpt", "llama")
    assert not (ckpt / "preprocessor_config.json").exists()
    adapter = load_model("hf", path=ckpt)
    assert adapter.image_processor is None and type(adapter.model).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize("model", ["hf", "toy_binding_text"])
def test_image_chunks_on_a_text_only_model_are_a_preflight_error(tmp_path, model):
    where = [f"model.path={text_checkpoint(tmp_path / 'ckpt', 'llama')}"] if model == "hf" else []
    problems = preflight(job(tmp_path, f"model={model}", *where, "bench=synthetic", "arms=[blind]", "n_items=1"))
    (line,) = [p for p in problems if "text-only" in p]
    assert line.startswith("bench=synthetic has image chunks") and f"model {model} (" in line


# ----- item 4: chat templates that take content only as a string ---------------------------------------------
@pytest.mark.parametrize(
    "template, content, header, footer",
    [
        (PARTS, "parts", "<|user|>\n", "\n<|assistant|>\n"),
        (STRING, "string", "<|user|>\n", "\n<|assistant|>\n"),
        (CONCAT, "string", "<s>[INST] ", " [/INST]"),
        (STARTS, "string", "<u>", "</u>"),
    ],
)
def test_chat_templates_of_either_content_shape(template, content, header, footer):
    tok = standin_tokenizer(300, {"<s>": 1, "</s>": 2}, bos_token="<s>", eos_token="</s>", chat_template=template)
    assert chat_with_content(tok, "ckpt") == ((header, footer), content)


NO_GENERATION_PROMPT = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
BOS_IN_TEMPLATE = "{{ bos_token }}{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"


@pytest.mark.parametrize(
    "template, add_bos, header, footer",
    [
        (NO_GENERATION_PROMPT, False, "<|user|>\n", "\n"),  # no assistant turn to open: the footer closes the user's
        (BOS_IN_TEMPLATE, True, "<s><u>", "</u>"),  # BOS from the template and the tokenizer: once, not twice
        (BOS_IN_TEMPLATE, False, "<s><u>", "</u>"),  # from the template only
        (STRING, True, "<s><|user|>\n", "\n<|assistant|>\n"),  # from the tokenizer only: put in front
    ],
)
def test_generation_prompt_and_bos_from_template_or_tokenizer(template, add_bos, header, footer):
    tok = standin_tokenizer(
        300, {"<s>": 1, "</s>": 2}, bos_token="<s>", eos_token="</s>", chat_template=template, add_bos_token=add_bos
    )
    (got_header, got_footer), _ = chat_with_content(tok, "ckpt")
    assert (got_header, got_footer) == (header, footer)
    assert tok(got_header, add_special_tokens=False)["input_ids"].count(1) == header.count("<s>")  # one BOS id


def test_no_chat_template_is_a_preflight_line_unless_chat_none(tmp_path):
    ckpt = text_checkpoint(tmp_path / "base-llama", "llama")
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    (ckpt / "chat_template.jinja").unlink(missing_ok=True)
    (line,) = model_problems("hf", ckpt)
    assert "has no chat template" in line and str(ckpt) in line and "model.chat=none" in line
    assert model_problems("hf", ckpt, chat="none") == []
    assert model_problems("hf", ckpt, chat="nope") == ["model.chat='nope': must be one of template, none"]
    with pytest.raises(ValueError, match="no chat template"):
        load_model("hf", path=ckpt)
    adapter = load_model("hf", path=ckpt, chat="none")
    assert adapter.chat is None and adapter.chat_content == "none"  # the stand-in adds no BOS: nothing wraps it


def test_real_tokenizers_serve_a_text_checkpoint(tmp_path, musique):
    """The real Qwen2 and Llama-2 tokenizer files (Qwen3's template takes either shape; Llama-2's has none here:
    a Llama-2 chat template that concatenates strings is added)."""
    if not (TOKENIZERS / "qwen2").is_dir() or not (TOKENIZERS / "llama2").is_dir():
        pytest.skip(f"no real tokenizer files under {TOKENIZERS}")
    for model_type, folder, vocab in (("qwen2", "qwen2", 151669), ("llama", "llama2", 32000)):
        ckpt = text_checkpoint(
            tmp_path / model_type,
            model_type,
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            bos_token_id=None if folder == "qwen2" else 1,
        )
        for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (ckpt / f).unlink(missing_ok=True)
        tok = tf.AutoTokenizer.from_pretrained(TOKENIZERS / folder)
        if not tok.chat_template:
            tok.chat_template = CONCAT
        tok.save_pretrained(ckpt)
        rows = pd.read_parquet(runner.run(hf_job(tmp_path / model_type, ckpt, musique)))
        check_identities(rows)


@pytest.mark.integration
def test_the_command_line_runs_a_checkpoint_by_path(tmp_path, musique):
    ckpt = text_checkpoint(tmp_path / "mistral", "mistral")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kamera.run",
            "model=hf",
            f"model.path={ckpt}",
            "bench=musique",
            ARMS,
            "model.dtype=float32",
            "n_items=2",
            f"paths.results={tmp_path}/raw",
            f"paths.outputs={tmp_path}/out",
            f"bench.root={musique}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (shard,) = (tmp_path / "raw" / "adhoc").glob("*.parquet")
    check_identities(pd.read_parquet(shard))


# ----- item 5: bench=binding_words, the binding task in words, on any text checkpoint -----------------------
@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral"])
def test_binding_words_runs_on_a_text_checkpoint(tmp_path, model_type):
    ckpt = text_checkpoint(tmp_path / f"my-{model_type}", model_type)
    cfg = job(
        tmp_path,
        "model=hf",
        f"model.path={ckpt}",
        "bench=binding_words",
        "n_items=3",
        "arms=[reprefill,blind,patch_r8,patch_full,cacheblend]",
    )
    rows = pd.read_parquet(runner.run(cfg))
    assert set(rows.arm) == {"reprefill", "blind", "patch_r8", "patch_full", "cacheblend"} and len(rows) == 15
    assert set(rows.bench) == {"binding_words"} and set(rows.subset) <= {"two_hop", "control", "control_b"}
    check_identities(rows[rows.arm != "cacheblend"])


# ----- item 1: the families a paper model serves, by its published config and shaped checkpoint ---------------
PAPER_SERVED = {kind: e.name for kind, e in served_families().items() if e.kind == "paper"}


def test_the_served_families_are_the_model_files_families():
    """model=hf serves a model_type exactly when a conf/model file of that family loads natively (the map is derived,
    not kept by hand): a paper model's entry before its tiny twin's, the text decoders beside them."""
    assert set(PAPER_SERVED) >= {
        "qwen2_5_vl",
        "qwen3_vl",
        "llava",
        "internvl",
        "smolvlm",
        "deepseek_vl_hybrid",
        "qwen3_omni_moe",
        "qwen2_5_omni",
        "qwen3_5",
        "gemma3n",
    }
    assert PAPER_SERVED["qwen2_5_vl"] == "qwen2_5_vl_7b" and served_families()["deepseek_v2"].name == "tiny_deepseek_v2"
    assert not {"kimi_vl", "phi3_v", "internvl_chat", "text", "auto"} & set(served_families())  # own loaders; toy; hf
    assert {"llama", "qwen2", "olmo2"} <= set(supported_model_types())


@pytest.mark.parametrize("model_type, paper", sorted(PAPER_SERVED.items()))
def test_a_published_config_maps_onto_the_paper_models_adapter(tmp_path, model_type, paper):
    """The checkpoint's config.json (here: the one the paper model publishes) picks the paper model's adapter,
    class and load options, without loading anything."""
    from kamera.models.shaped.writer import published_json

    config = published_json(paper)
    assert config["model_type"] == model_type
    (tmp_path / "config.json").write_text(json.dumps(config))
    e, base = own_entry("hf", tmp_path), entry(paper)
    assert (e.family, e.adapter, e.model_class, e.submodule) == (
        model_type,
        base.adapter,
        base.model_class,
        base.submodule,
    )
    assert e.load_kwargs == base.load_kwargs and model_type in supported_model_types()


@pytest.mark.shaped
@pytest.mark.full  # ~0.5-1.5 min each on 2 cores; the canaries' own loads and identities run in CI
@pytest.mark.parametrize(
    "paper",
    [pytest.param(n, marks=shaped_marks(n)) for n in ("smolvlm2", "internvl3_8b", "deepseek_vl_7b", "qwen2_5_omni_7b")],
)
def test_a_shaped_checkpoint_runs_by_path(tmp_path, shaped_root, paper):
    """The paper model's shaped checkpoint, named by path through model=hf: rows say its model_type, re-prefill is
    the reference and the full-rank patch restores it (float32)."""
    ckpt = shaped_root(paper) / entry(paper).repo_dir
    cfg = job(
        tmp_path,
        "model=hf",
        f"model.path={ckpt}",
        "bench=synthetic",
        "arms=[reprefill,blind,patch_full]",
        "n_items=1",
        "eta_floor=0",
    )
    rows = pd.read_parquet(runner.run(cfg))
    assert set(rows.model_type) == {entry(paper).family} and set(rows.checkpoint) == {ckpt.name}
    by = rows.set_index("arm")
    assert by.at["reprefill", "kl"] == pytest.approx(0.0, abs=1e-9)
    assert by.at["patch_full", "kl"] <= 1e-5 * max(by.at["blind", "kl"], 1e-3)


# ----- item 1, GGUF: model.path=<file.gguf> (llama.cpp / ollama's single-file checkpoints) ---------------------
def gguf_twin(ckpt: Path, out: Path) -> Path:
    """The Llama checkpoint ``ckpt`` as one float32 GGUF file, written as llama.cpp's converter lays it out
    (tensor names ``blk.N.attn_q`` …, Q/K rows permuted into its rotary order, which transformers' reader undoes;
    the tokenizer as a byte-level vocabulary with its chat template)."""
    gguf = pytest.importorskip("gguf")
    model = tf.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    tok, c = tf.AutoTokenizer.from_pretrained(ckpt), model.config
    heads, kv = c.num_attention_heads, c.num_key_value_heads

    def rotary_order(w, n):  # [n·2·half, in] → pairs interleaved, as llama.cpp's convert_hf_to_gguf permutes
        return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_context_length(c.max_position_embeddings), w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers), w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(heads), w.add_head_count_kv(kv), w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps), w.add_rope_dimension_count(c.hidden_size // heads)
    w.add_vocab_size(c.vocab_size), w.add_file_type(0)
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    w.add_tokenizer_model("gpt2"), w.add_token_list(tokens), w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([3 if t in tok.all_special_tokens else 1 for t in tokens])
    w.add_bos_token_id(tok.bos_token_id), w.add_eos_token_id(tok.eos_token_id), w.add_pad_token_id(tok.pad_token_id)
    w.add_chat_template(tok.chat_template)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_q.weight", rotary_order(sd[p + "self_attn.q_proj.weight"], heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", rotary_order(sd[p + "self_attn.k_proj.weight"], kv))
        for hf, gg in names.items():
            w.add_tensor(f"blk.{i}.{gg}.weight", sd[p + hf + ".weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"]), w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return out


def test_a_gguf_file_gives_the_rows_of_its_safetensors_twin(tmp_path, musique):
    ckpt = text_checkpoint(tmp_path / "my-llama", "llama")
    # GGUF holds rms_norm_eps as a float32: give the safetensors config that value, so the twins are one model
    config = json.loads((ckpt / "config.json").read_text())
    config["rms_norm_eps"] = float(np.float32(config["rms_norm_eps"]))
    (ckpt / "config.json").write_text(json.dumps(config))
    twin = gguf_twin(ckpt, tmp_path / "gguf" / "my-llama.f32.gguf")
    # float64: the two loads may lay the same weights out differently, so float32 kernels may sum them in another
    # order (η moved by 6e-6 under ATEN_CPU_CAPABILITY=default); in float64 that is ~1e-15 (docs/testing.md)
    safetensors_rows = pd.read_parquet(runner.run(hf_job(tmp_path / "st", ckpt, musique, "model.dtype=float64")))
    rows = pd.read_parquet(runner.run(hf_job(tmp_path / "gg", twin, musique, "model.dtype=float64")))
    assert set(rows.model_type) == {"llama"} and set(rows.checkpoint) == {twin.name}
    check_identities(rows)
    keys = ["item_id", "arm"]
    a, b = rows.sort_values(keys).reset_index(drop=True), safetensors_rows.sort_values(keys).reset_index(drop=True)
    assert list(a.item_id) == list(b.item_id) and list(a.pred) == list(b.pred)
    assert a.kl.to_numpy() == pytest.approx(b.kl.to_numpy(), rel=1e-7, abs=1e-13)
    assert a.eta.to_numpy() == pytest.approx(b.eta.to_numpy(), rel=1e-7, abs=1e-9, nan_ok=True)
    assert checkpoint_fingerprint(hf_job(tmp_path, twin, musique)) != checkpoint_fingerprint(
        hf_job(tmp_path, ckpt, musique)
    )


def test_a_bad_gguf_is_one_preflight_line(tmp_path, musique):
    pytest.importorskip("gguf")
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00truncated")
    (line,) = [p for p in preflight(hf_job(tmp_path, bad, musique)) if "broken.gguf" in p]
    assert "not a GGUF checkpoint transformers can read" in line and "\n" not in line
    missing = tmp_path / "nowhere.gguf"
    assert any("it does not exist" in p and ".gguf file" in p for p in preflight(hf_job(tmp_path, missing, musique)))


def test_a_model_path_that_is_a_file_says_so(tmp_path, musique):
    """Issue 29 item 10: a ``model.path`` that is a file said "config.json missing"."""
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"not a directory")
    (line,) = [p for p in preflight(hf_job(tmp_path, weights, musique)) if "hf:" in p]
    assert f"no checkpoint at {weights} (it is a file, not a checkpoint directory)" in line and "\n" not in line


# ----- item 4 (end to end): model.chat=none runs a checkpoint without a template, as its own job ------------------
def test_chat_none_runs_a_base_checkpoint_as_another_job(tmp_path, musique):
    ckpt = text_checkpoint(tmp_path / "base", "llama")
    (ckpt / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    assert any("has no chat template" in p for p in preflight(hf_job(tmp_path, ckpt, musique)))
    rows = pd.read_parquet(runner.run(hf_job(tmp_path, ckpt, musique, "model.chat=none")))
    check_identities(rows)
    templated = text_checkpoint(tmp_path / "templated", "llama")
    assert config_key(hf_job(tmp_path, templated, musique, "model.chat=none")) != config_key(
        hf_job(tmp_path, templated, musique)
    )


# ----- item 6: per-sample logs beside every shard ------------------------------------------------------------
def read_samples(shard: Path) -> pd.DataFrame:
    lines = shard.with_suffix(".samples.jsonl").read_text().splitlines()
    return pd.DataFrame([json.loads(x) for x in lines])


def test_samples_jsonl_has_one_line_per_row_and_matches_them(tmp_path):
    cfg = job(tmp_path, "model=tiny_qwen2_5_vl", "bench=synthetic", "arms=[reprefill,blind,patch_r8]", "n_items=3")
    shard = runner.run(cfg)
    rows, samples = pd.read_parquet(shard), read_samples(shard)
    assert len(samples) == len(rows) == 9 and not samples.duplicated(["item_id", "arm"]).any()
    both = rows.merge(samples, on=["item_id", "arm"], suffixes=("", "_s"))
    assert len(both) == 9
    for col in ("pred", "gold", "correct", "kl", "eta", "input_sha256", "prompt"):
        assert list(both[col]) == list(both[f"{col}_s"]), col
    assert samples.generated.isna().all() and set(samples.scoring) == {"logits"}
    assert all(p.count("<image>") == 3 and "What colour" in p and p.startswith("<|user|>") for p in samples.prompt)
    assert all(c == ["A", "B", "C", "D"] for c in samples.choices)
    per_item = samples.groupby("item_id").input_sha256.nunique()
    assert (per_item == 1).all() and samples.input_sha256.nunique() == 3  # one digest per item, distinct items
    # a run killed before its log was written: the next (complete, nothing to run) writes it from the rows
    shard.with_suffix(".samples.jsonl").unlink()
    assert runner.run(cfg) == shard
    assert read_samples(shard).equals(samples)


# ----- item 7: scoring=generate (lmms-eval's way) beside the logit argmax ---------------------------------------
def test_parse_choice_reads_the_first_choice_word():
    from kamera.arms.shape import parse_choice

    letters = ["A", "B", "C", "D"]
    for text, want in [
        ("B", "B"),
        ("(C) red", "C"),
        ("Answer: D.", "D"),
        ("the answer is", ""),
        ("", ""),
        ("**A**", "A"),
        ("E then B", "B"),
    ]:
        assert parse_choice(text, letters) == want, text


def test_scoring_generate_parses_a_generated_letter_as_its_own_job(tmp_path, musique):
    ckpt = text_checkpoint(tmp_path / "my-llama", "llama")
    mc = ("bench=binding_words", "n_items=3", "arms=[reprefill,blind,patch_full]", "max_new_tokens=4")
    rows = pd.read_parquet(runner.run(job(tmp_path, "model=hf", f"model.path={ckpt}", "scoring=generate", *mc)))
    check_identities(rows)
    assert set(rows.scoring) == {"generate"} and rows.generated.map(lambda t: isinstance(t, str)).all()
    from kamera.arms.shape import parse_choice

    for r in rows.itertuples():
        assert r.pred == parse_choice(r.generated, ["A", "B", "C", "D"]) and r.correct == float(r.pred == r.gold)
    assert config_key(hf_job(tmp_path, ckpt, musique, "scoring=generate")) != config_key(
        hf_job(tmp_path, ckpt, musique)
    )
    assert any("scoring='vote'" in p for p in preflight(hf_job(tmp_path, ckpt, musique, "scoring=vote")))


# ----- item 1: several checkpoints of your own in one group are several configs ------------------------------------
def test_two_checkpoints_in_one_group_have_their_own_config_keys(tmp_path, musique):
    from kamera.job.store import latest, shards

    a, b = text_checkpoint(tmp_path / "run-a", "llama", seed=0), text_checkpoint(tmp_path / "run-b", "llama", seed=1)
    cfgs = [hf_job(tmp_path, c, musique, "group=mine", "arms=[blind]") for c in (a, b)]
    keys = [config_key(c) for c in cfgs]
    assert keys[0] != keys[1]
    paths = [runner.run(c) for c in cfgs]
    found = shards(tmp_path / "raw", "mine")
    for key, path, ckpt in zip(keys, paths, (a, b), strict=True):
        (shard,) = latest(found, config_key=key)
        assert shard.path == path and set(pd.read_parquet(path).checkpoint) == {ckpt.name}
