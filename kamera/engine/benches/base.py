"""The interface of an engine benchmark: items of token ids a served model takes without a tokenizer, drawn from
a seed, so an engine job needs no data files."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EngineBench:
    """Random token-id items: span sizes (prefix, A, B, query), the id range, the answer tokens of the choice."""

    name: str
    sizes: dict
    ids: tuple[int, int]
    choices: tuple[int, ...]

    def items(self, n: int, seed: int = 0) -> list[dict]:
        """``n`` items of random token ids and a random gold choice; item i is the same for every ``n`` (one
        generator, drawn in order)."""
        g = torch.Generator().manual_seed(seed)
        out = []
        for i in range(n):
            spans = {role: torch.randint(*self.ids, (k,), generator=g).tolist() for role, k in self.sizes.items()}
            gold = int(torch.randint(0, len(self.choices), (1,), generator=g))
            out.append({"item_id": f"r{i:03d}", **spans, "gold": gold, "seed": seed})
        return out

    def identity(self) -> dict:
        """What the items are a function of, besides n and the seed: the benchmark part of a job's identity."""
        return {"name": self.name, "sizes": dict(self.sizes), "ids": list(self.ids), "choices": list(self.choices)}
