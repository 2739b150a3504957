"""The chatbridge package's structure in figures (issue 26): modules and lines, ``Any``, import
cycles, the largest modules, and the files one seat answer runs.

    .venv/bin/python bench/structure.py

Prints Markdown (paste it into ``bench/RESULTS.md``). Run from the repository root with the
project's venv (grimp finds the package there). Migrations are left out of every figure.

- **modules, lines**: ``chatbridge/**/*.py`` (``__init__.py`` files too), lines as ``wc -l``
  counts them (comments, docstrings and blank lines included).
- **Any**: ``Any`` used as a name in the code (ast ``Name``/``Attribute`` nodes: annotations,
  casts, ``typing.Any``), and for comparison every word ``Any`` in the text (imports, string
  annotations, comments, docstrings), as a ``grep -w`` would count.
- **import cycles**: grimp's import graph of the package, which sees imports inside functions;
  imports under ``if TYPE_CHECKING:`` are left out (they never run). A cycle is a strongly
  connected component of that graph: its modules, and one shortest cycle through it, each
  import marked "in a function" when it is one.
- **files per seat answer**: ``EXPECTED_PATH`` of ``tests/test_call_path.py``, which that test
  keeps equal to what one seat answer runs (from the browser's frame to ``ctx.elicit``
  returning), and of ``tests/test_mcp_call_path.py`` for a legacy MCP client's (from its
  reply to the seat's ``elicitation/create``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "chatbridge"
CALL_PATH_TEST = ROOT / "tests" / "test_call_path.py"
MCP_PATH_TEST = ROOT / "tests" / "test_mcp_call_path.py"
LARGEST = 8


@dataclass(frozen=True)
class Module:
    name: str  # dotted
    path: Path
    lines: int
    any_names: int  # ast Name/Attribute nodes named Any
    any_words: int  # \bAny\b in the text
    function_imports: frozenset[int]  # line numbers of imports inside functions


def _modules() -> list[Module]:
    found = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "migrations" in relative.parts:
            continue
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        parts = relative.with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append(
            Module(
                name=name,
                path=relative,
                lines=text.count("\n"),
                any_names=sum(
                    (isinstance(node, ast.Name) and node.id == "Any")
                    or (isinstance(node, ast.Attribute) and node.attr == "Any")
                    for node in ast.walk(tree)
                ),
                any_words=len(re.findall(r"\bAny\b", text)),
                function_imports=_function_imports(tree),
            )
        )
    return found


def _function_imports(tree: ast.Module) -> frozenset[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines.update(
                inner.lineno
                for inner in ast.walk(node)
                if isinstance(inner, ast.Import | ast.ImportFrom)
            )
    return frozenset(lines)


def _components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def _shortest_cycle(graph: grimp.ImportGraph, members: list[str]) -> list[str]:
    """One shortest cycle within ``members`` (first and last module the same)."""
    inside = set(members)
    best: list[str] = []
    for start in members:
        previous: dict[str, str] = {}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            imported = sorted(graph.find_modules_directly_imported_by(node) & inside)
            if start in imported:
                cycle = [node]
                while cycle[-1] != start:
                    cycle.append(previous[cycle[-1]])
                cycle = [*reversed(cycle), start]
                if not best or len(cycle) < len(best):
                    best = cycle
                break
            for nxt in imported:
                if nxt not in previous and nxt != start:
                    previous[nxt] = node
                    queue.append(nxt)
    return best


def _arrow(graph: grimp.ImportGraph, by_name: dict[str, Module], a: str, b: str) -> str:
    lines = {d["line_number"] for d in graph.get_import_details(importer=a, imported=b)}
    in_function = bool(lines) and lines <= by_name[a].function_imports
    return " →(in a function) " if in_function else " → "


def _short(name: str) -> str:
    return name.removeprefix(f"{PACKAGE}.") if name != PACKAGE else name


def _seat_answer_files(test: Path = CALL_PATH_TEST) -> tuple[str, ...]:
    tree = ast.parse(test.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EXPECTED_PATH" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"no EXPECTED_PATH in {test}")


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", PACKAGE], cwd=ROOT, capture_output=True
        ).stdout
    except OSError:
        return "unknown commit"
    return out.stdout.strip() + (" with uncommitted changes in chatbridge/" if dirty else "")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    modules = _modules()
    by_name = {m.name: m for m in modules}
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)
    cycles = _components(graph)
    with_type_checking = _components(grimp.build_graph(PACKAGE, cache_dir=None))
    seat = _seat_answer_files()
    mcp_seat = _seat_answer_files(MCP_PATH_TEST)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    print(f"Structure of `{PACKAGE}/` at {_commit()} ({when}); migrations left out.\n")
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| files per seat answer (`tests/test_call_path.py`) | {len(seat)} |")
    print(f"| … from a legacy MCP client (`tests/test_mcp_call_path.py`) | {len(mcp_seat)} |")
    print(f"| modules (`.py`, `__init__.py` included) | {len(modules)} |")
    print(f"| lines (`wc -l`) | {sum(m.lines for m in modules):,} |")
    print(f"| median / largest module (lines) | {_median(modules)} / {_largest(modules)} |")
    over = [m for m in modules if m.lines > 400]
    print(f"| modules over 400 lines | {len(over)} |")
    print(f"| `Any` as a name (ast `Name`/`Attribute`) | {sum(m.any_names for m in modules)} |")
    print(f"| the word `Any` (`\\bAny\\b`, as grep -w) | {sum(m.any_words for m in modules)} |")
    print(
        f"| import cycles (grimp, imports in functions included, TYPE_CHECKING left out) "
        f"| {len(cycles)} ({sum(len(c) for c in cycles)} modules) |"
    )
    print(
        f"| … with TYPE_CHECKING imports too | {len(with_type_checking)} "
        f"({sum(len(c) for c in with_type_checking)} modules) |"
    )

    print(f"\nLargest modules (top {LARGEST}):\n")
    print("| module | lines |")
    print("| --- | --- |")
    for m in sorted(modules, key=lambda m: (-m.lines, str(m.path)))[:LARGEST]:
        print(f"| `{m.path.as_posix()}` | {m.lines} |")

    print("\nImport cycles (each: its modules, then one shortest cycle through it):\n")
    if not cycles:
        print("none")
    for number, members in enumerate(cycles, 1):
        print(f"{number}. {len(members)} modules: {', '.join(_short(m) for m in members)}")
        cycle = _shortest_cycle(graph, members)
        steps = [_short(cycle[0])]
        for a, b in zip(cycle, cycle[1:], strict=False):
            steps.append(_arrow(graph, by_name, a, b) + _short(b))
        print(f"   shortest: {''.join(steps)}")

    print(f"\nFiles one seat answer runs ({len(seat)}):\n")
    for file in seat:
        print(f"- `{file}`")


def _median(modules: list[Module]) -> int:
    lines = sorted(m.lines for m in modules)
    return lines[len(lines) // 2]


def _largest(modules: list[Module]) -> int:
    return max(m.lines for m in modules)


if __name__ == "__main__":
    main()
