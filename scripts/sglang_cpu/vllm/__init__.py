"""Stand-in package: only `vllm._custom_ops.rotary_embedding`, for SGLang's rotary embedding on a CPU."""
