"""Fig. 9 / Fig. 10 extras: the models the paper adds beyond its six backbones, with an honest status.

None of these has an adapter proven on a shaped checkpoint yet, so each is registered without one:
``kamera.sweep --check`` (``runner.preflight``) and ``load_model`` report the entry's ``notes``, which
say exactly what is missing, before any weight loads. The paper's names: InternVL-Chat-V1.1 (Fig. 9,
Table 7), Gemma-3n (Fig. 9, plotted as "SWA"), a linear-attention hybrid (Fig. 9, plotted as "GDN
(linear)"; §C.4: "a linear-attention or SSM layer carries no KV to patch (its analogue is a
state-delta)"), Qwen2.5-Omni (Fig. 10, audio chunks, "n=40, exploratory").
"""

from __future__ import annotations

from kamera.models.entry import ModelEntry

# merged into the registry (kamera.models.registry.EXTRA_MODULES)
ENTRIES = [
    ModelEntry(
        "internvl_chat_v1_1", "internvl_chat", "MHA", None, "AutoModel",
        hf_id="OpenGVLab/InternVL-Chat-V1-1", remote_code=True,
        notes=(
            "remote code only (model_type internvl_chat: InternViT-6B at 448 px, pixel-shuffle 1024 → 256 "
            "tokens, MLP projector, a chat-tuned LLaMA2-13B, 19B in all; czczup/InternVL-doc "
            "docs/en/.../internvl1.1/introduction.md). Missing: a tensor map from its names onto native "
            "InternVLVisionModel + LlamaForCausalLM (transformers' internvl classes serve the InternVL3 '-hf' "
            "layout, not this one), its 448 px preprocessing and <img>/<IMG_CONTEXT> layout from a public "
            "implementation, and a shaped checkpoint proving them"
        ),
    ),
    ModelEntry(
        "gemma3n_e4b", "gemma3n", "GQA", None, "Gemma3nForConditionalGeneration",
        hf_id="google/gemma-3n-E4B-it",
        notes=(
            "native gemma3n classes exist, but no adapter: (1) the decoder reads per-layer inputs computed "
            "from token ids (hidden_size_per_layer_input), which the span encoder must carry per span as it "
            "does deepstack rows; (2) its sliding-window layers (window 512) cache only the last 512 tokens, "
            "so a B longer than the window cannot be spliced whole and the operator must skip or re-prefill "
            "those layers' evicted rows; (3) the last num_kv_shared_layers layers read an earlier layer's "
            "K/V and have no cache of their own: their patch is the shared layer's patch. None of the three "
            "is implemented or tested"
        ),
    ),
    ModelEntry(
        "gdn_hybrid", "qwen3_5", "hybrid", None, "Qwen3_5ForConditionalGeneration",
        hf_id="Qwen/Qwen3.5-27B",
        notes=(
            "the paper's 'GDN (linear)' hybrid, unnamed there; registered against Qwen3.5 (native qwen3_5 "
            "classes), whose layer_types make 3 of every 4 decoder layers Gated DeltaNet linear attention. "
            "Those layers cache a recurrent state and a conv state, no K/V: only the full-attention layers "
            "(every 4th) have keys to relocate and values to patch. B's recurrent state after A has no "
            "position-free canonical form (the paper's 'state-delta', outside this operator), so reuse needs "
            "either the conditioned state carried over (an oracle for those layers) or B re-run through them; "
            "no arm defines either yet, so there is no adapter"
        ),
    ),
    ModelEntry(
        "qwen2_5_omni_7b", "qwen2_5_omni", "GQA", None, "Qwen2_5OmniThinkerForConditionalGeneration",
        hf_id="Qwen/Qwen2.5-Omni-7B",
        notes=(
            "audio chunks for Fig. 10 (exploratory in the paper). Native thinker classes exist; missing: an "
            "adapter that encodes an audio span (Whisper-style features → the thinker's audio tower, "
            "TMRoPE positions from get_rope_index with audio_seqlens), a benchmark whose B spans are audio, "
            "and tiny/shaped-model tests of the identities on audio tokens"
        ),
    ),
]
