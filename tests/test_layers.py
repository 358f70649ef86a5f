"""The house: every import points down a floor (no circles, nothing runs back up), read from the source.

Each room (a package of kamera, or ``experiments``) sits on one floor of :data:`FLOORS`; a module may import
its own room and the rooms on floors below it, never a room on its own floor or above. Function-local and
``TYPE_CHECKING`` imports count too: an import that runs back up is a circle waiting to happen, wherever it
sits. The top-level aliases (``kamera.status``, ``kamera.shaped``, ``kamera.models.cost``) run their targets
with :mod:`runpy` and import nothing of kamera.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Floors, bottom up: the folder names read as the pipeline.
FLOORS: list[tuple[str, ...]] = [
    # utilities (errors, progress, knob checks); the hand-off (spans, items, selection); R(δ), ChunkKV, Δ, Patch
    # and the one discovery rule of plugin folders; provenance (digests, timestamps, the code version)
    ("kamera.errors", "kamera.env", "kamera.progress", "kamera.knobs", "kamera.discover", "kamera.items",
     "kamera.core", "kamera.provenance"),
    ("kamera.metrics", "kamera.models", "kamera.data"),  # KL, η, e90; adapters, FLOPs, shaped writers; loaders
    # an item's shared forwards, partial recompute, the plugin base; the live engine's KV connector, page store,
    # families and per-item measurement (core and models only)
    ("kamera.reuse", "kamera.engine"),
    ("kamera.arms", "kamera.toy"),  # reuse arms; toy tasks and models
    ("kamera.diagnostics", "kamera.window"),  # measurements behind the figures; window ops and probes
    ("kamera.probes", "kamera.agent"),  # per-item probes over the diagnostics; agent traces replayed over windows
    ("kamera.job",),  # spec, checks, the item shape's contract and its choice, selection, identity, rows, store
    # the job shapes, each beside what it drives (kamera.discover.job_shapes: the job layer never imports one)
    ("kamera.arms.shape", "kamera.window.shape", "kamera.engine.shape"),
    ("kamera.agent.shape",),  # the agent shape extends the window shape
    ("kamera.run", "kamera.sweep"),  # one job; a sweep of jobs (expansion, status, cost, rehearsal)
    ("experiments", "kamera.real"),  # rows → tables and figures; the real tier (jobs on a shipped checkpoint, report)
]
FACE = ("kamera",)  # the package face (kamera/__init__.py) may import any room; no room imports it
ALIASES = ("kamera.status", "kamera.shaped", "kamera.models.cost")  # CLI aliases: runpy only
# What a renderer must not import: model, forward and arm code (rows in, tables out).
NOT_IN_EXPERIMENTS = (
    "kamera.models",
    "kamera.reuse",
    "kamera.arms",
    "kamera.probes",
    "kamera.core",
    "kamera.run.runner",
    "kamera.toy",
    "kamera.data",
    "kamera.window",
)


def _modules() -> dict[str, Path]:
    out = {}
    for base in ("kamera", "experiments"):
        for p in (ROOT / base).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The kamera / experiments modules ``name`` imports anywhere in its file (resolved to known modules).

    ``from package import submodule`` imports the submodule, not the package's face (its ``__init__``, which
    Python runs for any submodule import): only a name the face itself defines is an import of the face."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            subs = [f"{base}.{a.name}" for a in node.names]
            targets = [s for s in subs if s in MODULES]
            if len(targets) < len(subs):  # a name the module (or package face) defines
                targets.append(base)
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # `from kamera.job.spec import X` → kamera.job.spec
                t = t.rpartition(".")[0]
            if t:
                found.add(t)
    found.discard(name)
    return found


def room_of(module: str) -> str:
    """The room a module lives in: the longest room name of :data:`FLOORS` it starts with."""
    rooms = [r for floor in FLOORS for r in floor] + list(ALIASES) + list(FACE)
    hits = [r for r in rooms if module == r or module.startswith(r + ".")]
    if not hits:
        raise AssertionError(f"{module} is in no room of FLOORS: add its package to tests/test_layers.py")
    return max(hits, key=len)


def floor_of(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


EDGES = {(m, t) for m, p in MODULES.items() for t in _imports(m, p)}


def test_every_module_has_a_room():
    for m in MODULES:
        room_of(m)


def test_every_import_points_down_a_floor():
    bad = []
    for m, t in sorted(EDGES):
        a, b = room_of(m), room_of(t)
        if a == b or a in FACE:
            continue
        if a in ALIASES or b in ALIASES or b in FACE:
            bad.append(f"{m} → {t}: aliases and the package face are imported by no room, and import nothing")
        elif floor_of(b) >= floor_of(a):
            bad.append(f"{m} ({a}, floor {floor_of(a) + 1}) → {t} ({b}, floor {floor_of(b) + 1})")
    assert not bad, "imports that do not point down:\n" + "\n".join(bad)


def test_no_import_circle_between_modules_of_different_rooms():
    graph: dict[str, set[str]] = {}
    for m, t in EDGES:
        if room_of(m) != room_of(t):
            graph.setdefault(room_of(m), set()).add(room_of(t))
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in graph.get(node, ()):
            if seen.get(nxt) == 1:
                pytest.fail(f"import circle: {' → '.join([*path, node, nxt])}")
            if nxt not in seen:
                visit(nxt, [*path, node])
        seen[node] = 2

    for room in list(graph):
        if room not in seen:
            visit(room, [])


def circles(edges: set[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative): every circle."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.add(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def test_no_import_circle_at_all_inside_rooms_included():
    found = [sorted(c) for c in circles(EDGES)]
    assert not found, "import circles between modules:\n" + "\n".join(" ⇄ ".join(c) for c in found)


def test_the_circle_finder_finds_a_circle_inside_one_room():
    """The check above can fail: a circle of three modules of one room, beside a clean chain."""
    edges = {("r.a", "r.b"), ("r.b", "r.c"), ("r.c", "r.a"), ("r.c", "r.d"), ("s.x", "s.y")}
    assert circles(edges) == [{"r.a", "r.b", "r.c"}]


def test_the_hand_off_and_the_core_import_nothing_above_them():
    for m, t in EDGES:
        if room_of(m) in ("kamera.items", "kamera.core"):
            assert room_of(t) == room_of(m), f"{m} imports {t}"


def test_renderers_import_no_model_forward_or_arm_code():
    bad = [
        f"{m} → {t}"
        for m, t in EDGES
        if m.startswith("experiments") and any(t == x or t.startswith(x + ".") for x in NOT_IN_EXPERIMENTS)
    ]
    assert not bad, "\n".join(sorted(bad))


def test_the_house_is_at_most_nine_rooms_deep():
    assert len(FLOORS) <= 11  # nine floors of the pipeline, two of job shapes beside the rooms they drive
    # the longest chain of room imports: a floor count measured, not declared
    graph: dict[str, set[str]] = {}
    for m, t in EDGES:
        a, b = room_of(m), room_of(t)
        if a != b and a not in FACE:
            graph.setdefault(a, set()).add(b)

    def height(room: str) -> int:
        return 1 + max((height(r) for r in graph.get(room, ())), default=0)

    assert max(height(r) for r in graph) <= 9


def test_diagnostics_the_renderers_read_are_record_level():
    """A diagnostics module a renderer imports holds summaries of stored records, not the measurement code."""
    read = {t for m, t in EDGES if m.startswith("experiments") and room_of(t) == "kamera.diagnostics"}
    heavy = ("kamera.models", "kamera.reuse", "kamera.arms", "kamera.core")
    bad = [f"{r} → {t}" for r in sorted(read) for m, t in EDGES if m == r and room_of(t) in heavy]
    assert read and not bad, "\n".join(bad)
