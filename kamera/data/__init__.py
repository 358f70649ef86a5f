"""Benchmark loaders: seven local benchmarks plus ``synthetic``, cut into one chunked-item schema.

``load_items(bench, ...)`` returns :class:`ChunkedItem`s whose ``spans()`` are the
``[prefix?, A_1..A_k, B, query]`` hand-off to the adapters; ``score(item, prediction)`` scores an
answer by the benchmark's own rules; ``make_fixture(bench, root)`` writes a tiny copy of a benchmark in
its real on-disk layout for tests. Module per benchmark: ``mm_niah``, ``milebench``, ``muirbench``,
``videomme``, ``egoschema``, ``mmlongbench_doc``, ``musique``, ``synthetic``; shared: ``schema``,
``scorers``, ``selection``, ``media``, ``fixtures``, ``base``, ``registry``.
"""

from kamera.data.errors import BenchmarkDataMissing, ItemError, MediaError
from kamera.data.registry import BENCHMARKS, get_benchmark, load_items, make_fixture
from kamera.data.schema import IMAGE_TOKEN, ChunkedItem, MediaRef, PromptTemplate, Segment
from kamera.data.scorers import SCORERS, extract_choice_letter, gold_letter, score, score_detail
from kamera.data.selection import LoadedItems, LoadReport, Skip

__all__ = [
    "BENCHMARKS",
    "IMAGE_TOKEN",
    "SCORERS",
    "BenchmarkDataMissing",
    "ChunkedItem",
    "ItemError",
    "LoadReport",
    "LoadedItems",
    "MediaError",
    "MediaRef",
    "PromptTemplate",
    "Segment",
    "Skip",
    "extract_choice_letter",
    "get_benchmark",
    "gold_letter",
    "load_items",
    "make_fixture",
    "score",
    "score_detail",
]
