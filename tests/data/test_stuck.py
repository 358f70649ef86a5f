"""The stuck rate (issue 42 item 3, PRCR's failure measure; docs/metrics.md "Stuck rate"): a generation that repeats a
span at its end, or runs to the length limit without an answer its benchmark's parse can read, is stuck; every
generated answer's row carries it and the accuracy tables print its rate beside the accuracy."""

from __future__ import annotations

import pandas as pd
import pytest
from test_data_scorers import make_item

from kamera.data.scorers import has_answer, repeats_a_span, stuck
from kamera.run import runner
from kamera.sweep import compose_config


@pytest.mark.parametrize(
    ("tokens", "loops"),
    [
        ([1, 2, 3, 4, 5, 5, 5, 5, 5, 5], True),  # one token six times
        ([9, 1, 2, 1, 2, 1, 2], True),  # a 2-token span three times
        ([7, 1, 2, 3, 1, 2, 3, 1, 2, 3], True),  # a 3-token span three times
        ([5, 5, 5, 5, 5], False),  # five equal tokens cover fewer than six
        ([1, 2, 3, 1, 2, 3, 4], False),  # the loop must reach the end
        ([1, 2, 3, 4, 5, 6, 7, 8], False),
        ([], False),
    ],
)
def test_a_repeated_span_is_found_only_at_the_end_and_only_when_it_covers_six_tokens(tokens, loops):
    assert repeats_a_span(tokens) is loops


def test_stuck_is_a_loop_or_the_length_limit_without_an_answer():
    limit = 8
    assert stuck([1, 2, 3, 4, 5, 6, 7, 8], limit, answered=False)  # ran to the limit, no answer
    assert not stuck([1, 2, 3, 4, 5, 6, 7, 8], limit, answered=True)  # ran to the limit with an answer
    assert not stuck([1, 2, 3], limit, answered=False)  # stopped (a stop token) without one: wrong, not stuck
    assert stuck([4, 4, 4, 4, 4, 4], limit, answered=True)  # a loop, even with an answer parsed from it
    with pytest.raises(ValueError, match="length limit"):
        stuck([1], 0, answered=True)


def test_an_answer_is_what_the_benchmarks_own_parse_reads():
    mc = make_item("mc_letter", "B", "B", "letter", choices=["red", "green", "blue", "grey"])
    assert has_answer(mc, "The answer is B") and not has_answer(mc, "well well well")
    doc = make_item("mmlongbench_rule", "3", 3, "Int")
    assert has_answer(doc, "about 3 pages") and not has_answer(doc, "several")
    musique = make_item("musique_em_f1", "Paris", "paris", "open")
    assert has_answer(musique, "Paris") and not has_answer(musique, "the")
    with pytest.raises(ValueError, match="unknown scorer"):
        has_answer(make_item("vote", "B", "B", "letter"), "B")


def test_generated_rows_carry_stuck_and_the_accuracy_tables_print_its_rate(tmp_path, monkeypatch):
    """A generation that loops is stuck in its row and Table 3 / 4 print ``stuck 1.00`` beside the accuracy; a
    logit-scored row's ``stuck`` is null and its cell has no rate."""
    from experiments.table3 import aggregate
    from kamera.models.base import Adapter

    def cfg(*extra: str):
        return compose_config([f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", "device=cpu",
                               "model=tiny_qwen2_5_vl", "bench=synthetic", "arms=[reprefill,blind,prcr]",
                               "n_items=2", "max_new_tokens=6", *extra])

    logits = pd.read_parquet(runner.run(cfg()))
    assert logits["stuck"].isna().all() and "stuck" not in aggregate(logits)["cell"].iloc[0]
    monkeypatch.setattr(Adapter, "greedy", lambda self, out, n, stop: [self.stop_ids()[0] + 1] * n)  # one token
    looped = pd.read_parquet(runner.run(cfg("scoring=generate")))
    assert len(looped) == 6 and (looped["stuck"] == 1.0).all()
    assert all(c.endswith(" · stuck 1.00") for c in aggregate(looped)["cell"])
