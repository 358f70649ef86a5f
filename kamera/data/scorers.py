"""Scorers, one per benchmark evaluation, dispatched on ``ChunkedItem.scorer``.

Each follows the rules of the benchmark's reference evaluation (cited per function) and is written
here from those rules. Every scorer returns a dict with a primary ``"score"`` in [0, 1] plus any
secondary metrics; :func:`score` returns the primary one.

- ``mc_letter``: option-letter extraction for Video-MME, EgoSchema, MuirBench and ``synthetic``. It
  accepts what the reference parsers accept ("B", "B.", "(B)", "The best answer is B") and, unlike
  lmms-eval's first-capital-letter regex, does not read the article "A" in "A man ..." as option A.
- ``mmniah_mc`` / ``mmniah_count``: MM-NIAH ``calculate_scores.py:is_correct`` (strict letter parse;
  counting soft accuracy over a JSON list).
- ``milebench_choice``: MileBench ``evaluate.py:match_choice`` ("X option text", option text, bare
  letter). One deliberate deviation: an empty prediction scores 0 (the reference maps it to "C").
- ``mmlongbench_rule``: lmms-eval's rule-only MMLongBench-Doc scoring by ``answer_format``.
- ``musique_em_f1``: MuSiQue / SQuAD answer EM (primary) and F1 against the answer and its aliases.
"""

from __future__ import annotations

import ast
import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kamera.data.schema import LETTERS

if TYPE_CHECKING:
    from kamera.data.schema import ChunkedItem

Scorer = Callable[["ChunkedItem", str], dict[str, float]]

# ------------------------------------------------------------------------------ option-letter parsing

_ANSWER_PHRASE = re.compile(
    r"(?i:answer|option|choice)\s*(?i:is|would\s+be|should\s+be)?\s*[:\-]?\s*\(?([A-Z])\)?(?![A-Za-z0-9])"
)
_LEADING = re.compile(r"^\s*[\(\[]?([A-Z])(?:[\)\]\.:]|\s*$)")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'])([A-Z])(?![A-Za-z0-9'])")
# "A" before a lower-case word is the article ("A man …") unless that word reads as a verb or conjunction
_ARTICLE_A = re.compile(
    r"\s+(?!(?:or|and|is|was|seems|would|should|could|might|because|since|fits|matches|best)\b)[a-z]"
)


def _norm_words(s: str) -> str:
    """Lower-case, punctuation to spaces, single spaces: for matching option texts."""
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def extract_choice_letter(
    prediction: str, n_choices: int, choices: Sequence[str] | None = None
) -> str | None:
    """The option letter a free-form answer picks, or None when it names none (or several).

    Tried in order: the whole answer is a (decorated) letter; a leading "B." / "(B)"; "answer is B" /
    "option (B)" phrases; a single standalone capital option letter ("A" before a lower-case word is
    the article, unless that word is a verb or conjunction: "A is right", "A or B"); a single option
    text contained in the answer.
    """
    letters = LETTERS[:n_choices]
    text = prediction.replace("*", "").strip()
    if not text or not letters:
        return None
    bare = re.fullmatch(r"[\W_]*([A-Za-z])[\W_]*", text)
    if bare and bare.group(1).upper() in letters:
        return bare.group(1).upper()
    lead = _LEADING.match(text)
    if lead and lead.group(1) in letters:
        return lead.group(1)
    phrased = [m.group(1) for m in _ANSWER_PHRASE.finditer(text) if m.group(1) in letters]
    if phrased:
        return phrased[-1]
    found = {
        m.group(1)
        for m in _STANDALONE.finditer(text)
        if m.group(1) in letters and not (m.group(1) == "A" and _ARTICLE_A.match(text, m.end()))
    }
    if len(found) == 1:
        return found.pop()
    if choices:
        said = _norm_words(text)
        hits = [
            letters[i] for i, c in enumerate(choices[:n_choices]) if _norm_words(c) and _norm_words(c) in said
        ]
        if len(hits) == 1:
            return hits[0]
    return None


def score_mc_letter(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """Accuracy of the extracted option letter against the gold letter."""
    letter = extract_choice_letter(prediction, item.n_choices, item.choices)
    return {"score": float(letter is not None and letter == item.gold_norm)}


# -------------------------------------------------------------------------------------------- MM-NIAH


def mmniah_letter_index(prediction: str) -> int | None:
    """MM-NIAH's parse of a multiple-choice response: a digit string, or one letter after dropping
    "the answer is", "*" and anything from the first "."; None when it is not a single letter."""
    r = prediction.strip().strip(".")
    if r.isdigit():
        return int(r)
    r = r.lower().replace("the answer is", "").replace("*", "")
    if "." in r:
        r = r.split(".")[0].replace(",", "")
    r = r.strip()
    if "the camera is moving left" in r:
        r = "a"
    elif "the camera is moving right" in r:
        r = "b"
    if len(r) != 1 or not r.isalpha():
        return None
    return ord(r) - ord("a")


def score_mmniah_mc(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """MM-NIAH multiple choice: the parsed option index equals the gold index (``item.gold``)."""
    return {"score": float(mmniah_letter_index(prediction) == item.gold)}


def mmniah_count_list(prediction: str) -> list | None:
    """MM-NIAH's parse of a counting response: a JSON list, or a JSON object of lists concatenated; None otherwise."""
    r = prediction.strip().strip(".").replace("json", "").replace("```", "").strip()
    try:
        parsed = json.loads(r)
    except ValueError:
        return None
    if isinstance(parsed, dict):  # {"image 1": [..], ...}: the values concatenated, lists only
        if not all(isinstance(v, list) for v in parsed.values()):
            return None
        parsed = [x for v in parsed.values() for x in v]
    return parsed if isinstance(parsed, list) else None


def score_mmniah_count(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """MM-NIAH counting soft accuracy: positional matches of a JSON list answer over the gold length."""
    gold: list[int] = item.gold_norm
    parsed = mmniah_count_list(prediction)
    if parsed is None or not gold:
        return {"score": 0.0}
    return {"score": sum(p == g for p, g in zip(parsed, gold, strict=False)) / len(gold)}


# ------------------------------------------------------------------------------------------ MileBench

_MB_PUNCT = [
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
]


def milebench_normalise(s: str) -> str:
    """MileBench's answer normalisation: VQA-style punctuation handling, quotes stripped, lower case."""
    s = s.replace("\n", " ").replace("\t", " ").strip()
    digit_comma = re.search(r"\d,\d", s) is not None
    out = s
    for p in _MB_PUNCT:
        out = out.replace(p, "") if (p + " " in s or " " + p in s or digit_comma) else out.replace(p, " ")
    out = re.sub(r"\.(?!\d)", "", out)
    return out.strip().strip("'").strip('"').strip().lower()


def milebench_letter(prediction: str, options: Sequence[str]) -> str:
    """MileBench ``match_choice``: "X option" anywhere, else an option text (spaces ignored), else a
    bare letter, else the option letters found in the answer concatenated (right only if exactly one)."""
    letters = LETTERS[: len(options)]
    text = milebench_normalise(prediction)
    if not text:
        return ""
    opts = [milebench_normalise(o) for o in options]
    labelled = [milebench_normalise(f"{k} {o}") for k, o in zip(letters, opts, strict=True)]
    hit = re.search("|".join(re.escape(x) for x in labelled), text)
    if hit:
        return hit.group(0)[0].upper()
    squeezed = text.replace(" ", "")
    spots = [(squeezed.find(o.replace(" ", "")), i) for i, o in enumerate(opts) if o.replace(" ", "")]
    spots = [(pos, i) for pos, i in spots if pos >= 0]
    if spots:
        return letters[min(spots)[1]]
    if len(text) == 1 and text.upper() in letters:
        return text.upper()
    return "".join(ch.upper() for ch in text if ch.upper() in letters)


def score_milebench(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """MileBench multiple-choice accuracy: the matched letter equals the gold option's letter."""
    return {"score": float(milebench_letter(prediction, item.choices or []) == item.gold_norm)}


# ------------------------------------------------------------------------------------ MMLongBench-Doc

UNANSWERABLE = "not answerable"


def parse_literal_list(value: Any) -> list[Any]:
    """A list from a list or from a string holding a Python list literal (``"[3, 5]"``, ``"['a']"``);
    any other value becomes a one-element list, an empty string an empty list."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                parsed = ast.literal_eval(s)
            except (ValueError, SyntaxError):
                return [value]
            return list(parsed) if isinstance(parsed, list | tuple) else [parsed]
        return [value] if s else []
    return [] if value is None else [value]


def mmlb_clean(value: Any) -> str:
    """MMLongBench-Doc string cleaning: lower case, parentheses, quotes, "$", "%" and unit suffixes off."""
    s = str(value if value is not None else "").lower().strip()
    s = re.sub(r"\s*\([^)]*\)", "", s).strip()
    s = re.sub(r"^['\"]|['\"]$", "", s).strip()
    s = s.lstrip("$").strip().rstrip("%").strip()
    for suffix in (" miles", " mile", " million"):
        if s.endswith(suffix):
            s = s[: -len(suffix)].strip()
    return " ".join(s.split())


def _exact_match_kind(s: str) -> bool:
    """Answers compared exactly rather than by ANLS: URLs, file names, page refs, numbers, times, dates."""
    return bool(
        "https://" in s
        or "http://" in s
        or s.endswith((".py", ".ipynb"))
        or s.startswith("page")
        or re.fullmatch(r"\b\d+(-\d+|\s\d+)?\b", s)
        or "a.m." in s
        or "p.m." in s
        or re.fullmatch(r"\b\d{4}[-\s]\d{2}([-\s]\d{2})?\b", s)
        or re.fullmatch(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}", s)
    )


def _levenshtein(a: str, b: str) -> int:
    if len(a) > len(b):
        a, b = b, a
    row = list(range(len(a) + 1))
    for j, cb in enumerate(b, 1):
        prev, row[0] = row[0], j
        for i, ca in enumerate(a, 1):
            prev, row[i] = row[i], min(row[i] + 1, row[i - 1] + 1, prev + (ca != cb))
    return row[-1]


def anls(gold: str, pred: str, threshold: float = 0.5) -> float:
    """Normalised Levenshtein similarity, zeroed at or below ``threshold``."""
    if not gold and not pred:
        return 1.0
    if not gold or not pred:
        return 0.0
    value = 1.0 - _levenshtein(gold, pred) / max(len(gold), len(pred))
    return value if value > threshold else 0.0


def first_number(value: Any) -> float | None:
    """The first number in a string (thousands commas ignored), or None."""
    m = re.search(r"[-+]?\d*\.?\d+", str(value if value is not None else "").replace(",", ""))
    return float(m.group(0)) if m else None


def _decimals(x: float) -> int:
    s = str(x)
    return len(s.split(".", 1)[1]) if "." in s else 3


def float_match(gold: float, pred: float) -> bool:
    """MMLongBench-Doc float equality: within 1% relative, or equal when rounded to the shared precision;
    the gold ×100 and ÷100 are also accepted (percent vs fraction)."""
    for ref in (gold / 100.0, gold, gold * 100.0):
        if math.isclose(ref, pred, rel_tol=0.01):
            return True
        digits = max(min(_decimals(pred), _decimals(ref)), 2)
        if round(pred, digits) == round(ref, digits):
            return True
    return False


def mmlb_normalise(answer: str, answer_format: str) -> Any:
    """The normalised gold of an MMLongBench-Doc answer: number, cleaned string, sorted cleaned list."""
    fmt = answer_format.lower()
    if fmt in ("int", "float"):
        return first_number(answer)
    if fmt == "list":
        return sorted(mmlb_clean(x) for x in parse_literal_list(answer))
    if fmt == "none":
        return UNANSWERABLE
    return mmlb_clean(answer)


def mmlongbench_score(gold: Any, prediction: str, answer_format: str) -> float:
    """lmms-eval's rule-only MMLongBench-Doc score for one prediction, by answer format."""
    fmt = answer_format.lower()
    if fmt == "none":
        return float(mmlb_clean(prediction) == UNANSWERABLE)
    if fmt in ("int", "float"):
        g, p = first_number(gold), first_number(prediction)
        if g is None or p is None:
            return 0.0
        return float(int(g) == int(p)) if fmt == "int" else float(float_match(g, p))
    if fmt == "list":
        gs = sorted(mmlb_clean(x) for x in parse_literal_list(gold))
        ps = sorted(mmlb_clean(x) for x in parse_literal_list(prediction))
        if len(gs) != len(ps):
            return 0.0
        if not gs:
            return 1.0
        if first_number(gs[0]) is not None or _exact_match_kind(gs[0]):
            return float(gs == ps)
        return min(anls(g, p) for g, p in zip(gs, ps, strict=True))
    g, p = mmlb_clean(gold), mmlb_clean(prediction)
    return float(g == p) if _exact_match_kind(g) else anls(g, p)


def score_mmlongbench(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """MMLongBench-Doc accuracy, plus whether the prediction claims the question is answerable (for F1)."""
    s = mmlongbench_score(item.gold, prediction, item.answer_format)
    return {"score": s, "pred_answerable": float(mmlb_clean(prediction) != UNANSWERABLE)}


# -------------------------------------------------------------------------------------------- MuSiQue


def squad_normalise(s: str) -> str:
    """SQuAD / MuSiQue answer normalisation: lower case, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _token_f1(gold: str, pred: str) -> float:
    g, p = squad_normalise(gold).split(), squad_normalise(pred).split()
    if not g or not p:
        return float(g == p)
    common = sum((Counter(g) & Counter(p)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def score_musique(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """MuSiQue answer EM (primary) and F1, each the max over the answer and its aliases."""
    golds: list[str] = [item.gold, *item.meta.get("answer_aliases", [])]
    em = max(float(squad_normalise(prediction) == squad_normalise(g)) for g in golds)
    f1 = max(_token_f1(g, prediction) for g in golds)
    return {"score": em, "em": em, "f1": f1}


# ----------------------------------------------------------------------------------------- dispatch

SCORERS: dict[str, Scorer] = {
    "mc_letter": score_mc_letter,
    "mmniah_mc": score_mmniah_mc,
    "mmniah_count": score_mmniah_count,
    "milebench_choice": score_milebench,
    "mmlongbench_rule": score_mmlongbench,
    "musique_em_f1": score_musique,
}


def score_detail(item: ChunkedItem, prediction: str) -> dict[str, float]:
    """All metrics of ``item.scorer`` for one prediction (``"score"`` is the primary one)."""
    try:
        fn = SCORERS[item.scorer]
    except KeyError:
        raise ValueError(f"unknown scorer {item.scorer!r}; known: {sorted(SCORERS)}") from None
    return fn(item, prediction)


def score(item: ChunkedItem, prediction: str) -> float:
    """The primary score in [0, 1] of one prediction for one item, by the benchmark's own rules."""
    return score_detail(item, prediction)["score"]


# ------------------------------------------------------------------------ an answer at all, and the stuck rate


def _mmlongbench_answers(item: ChunkedItem, prediction: str) -> bool:
    fmt = item.answer_format.lower()
    if fmt in ("int", "float"):
        return first_number(prediction) is not None
    if fmt == "list":
        return bool(parse_literal_list(prediction))
    return mmlb_clean(prediction) != ""  # "not answerable" is an answer


ANSWERED: dict[str, Callable[[ChunkedItem, str], bool]] = {  # per scorer: its parse finds an answer in the text
    "mc_letter": lambda item, p: extract_choice_letter(p, item.n_choices, item.choices) is not None,
    "mmniah_mc": lambda item, p: mmniah_letter_index(p) is not None,
    "mmniah_count": lambda item, p: mmniah_count_list(p) is not None,
    "milebench_choice": lambda item, p: milebench_letter(p, item.choices or []) != "",
    "mmlongbench_rule": _mmlongbench_answers,
    "musique_em_f1": lambda item, p: squad_normalise(p) != "",
}
STUCK_REPEATS = 3  # a span repeated back to back this many times at the end of a generation is a loop
STUCK_MIN_TOKENS = 6  # ... when the repeats cover at least this many tokens (a single token: 6 times)


def has_answer(item: ChunkedItem, prediction: str) -> bool:
    """Whether ``item.scorer``'s own parse finds an answer in a prediction (right or wrong): an option letter, a
    number, a list, a non-empty normalised text; the stuck rate's "without an answer" is its negation."""
    try:
        fn = ANSWERED[item.scorer]
    except KeyError:
        raise ValueError(f"unknown scorer {item.scorer!r}; known: {sorted(ANSWERED)}") from None
    return fn(item, prediction)


def repeats_a_span(tokens: Sequence[int], repeats: int = STUCK_REPEATS, min_tokens: int = STUCK_MIN_TOKENS) -> bool:
    """Whether a generation ends in one span of p ≥ 1 tokens repeated ``repeats`` times back to back, the repeats
    covering at least ``min_tokens`` tokens (p = 1: ``min_tokens`` equal tokens; p = 2: 3 copies)."""
    n = len(tokens)
    for p in range(1, n // repeats + 1):
        cover = max(repeats * p, -(-min_tokens // p) * p)  # whole copies of the span, at least min_tokens
        tail = list(tokens[n - cover:])
        if cover <= n and all(tail[i] == tail[i % p] for i in range(cover)):
            return True
    return False


def stuck(tokens: Sequence[int], limit: int, answered: bool) -> bool:
    """A generation that stopped making progress (docs/metrics.md "Stuck rate"): it ends in a repeated span
    (:func:`repeats_a_span`), or it ran to the length limit (``limit`` tokens and no stop token, the greedy decode's
    tokens excluding the stop) without an answer (``answered`` False)."""
    if limit < 1:
        raise ValueError(f"the length limit must be >= 1 token, got {limit}")
    return repeats_a_span(tokens) or (len(tokens) >= limit and not answered)


def gold_letter(item: ChunkedItem) -> str | None:
    """The gold option letter of a multiple-choice item (None for open questions)."""
    return item.gold_letter
