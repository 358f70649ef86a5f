"""``engine_mc``: random token ids [prefix 4 · A 96 · B 160 · query 8] from [16, 500) with a four-way choice at the
answer tokens 10–13 (an M-RoPE model gets an image in A and one at the head of B, :mod:`kamera.engine.measure`)."""

from kamera.engine.benches.base import EngineBench

SPEC = EngineBench("engine_mc", {"prefix": 4, "A": 96, "B": 160, "query": 8}, (16, 500), (10, 11, 12, 13))
