"""The engine floor: kamera's chunk served inside a live inference engine (vLLM's KV connector, SGLang's radix cache).

``kamera.engine.store`` (pages and patches on disk) needs only torch and safetensors;
``kamera.engine.vllm`` (the connector and :class:`~kamera.engine.vllm.EngineSession`) needs the optional
``engine`` install (README, docs/engine.md) and is imported only by code that runs the engine;
``kamera.engine.sglang_radix`` (the radix cache) runs inside an SGLang server, and
``kamera.engine.sglang_server`` (its client session) needs neither.
"""
