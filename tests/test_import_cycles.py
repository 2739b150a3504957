"""No import cycle among ChatBridge's modules, imports inside functions included (grimp reads
every import statement of a module, wherever it stands). Imports under ``TYPE_CHECKING`` are
left out: they never run, and annotations naming each other's types are not a dependency of
one module's code on another's."""

from __future__ import annotations

import grimp

# Cycles tolerated for now, each named so that whoever breaks it removes it here (none left).
ALLOWED: list[frozenset[str]] = []


def import_cycles(package: str) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (each holds a cycle)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[frozenset[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                cycles.append(frozenset(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def describe(cycle: frozenset[str]) -> str:
    graph = grimp.build_graph("chatbridge", exclude_type_checking_imports=True, cache_dir=None)
    lines = []
    for importer in sorted(cycle):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & cycle):
            where = graph.get_import_details(importer=importer, imported=imported)
            at = ", ".join(str(d["line_number"]) for d in where)
            lines.append(f"  {importer} -> {imported} (line {at})")
    return "\n".join(lines)


def test_chatbridge_has_no_import_cycle() -> None:
    cycles = import_cycles("chatbridge")
    new = [c for c in cycles if c not in ALLOWED]
    assert not new, "import cycles:\n" + "\n\n".join(describe(c) for c in new)
    gone = [sorted(c) for c in ALLOWED if c not in cycles]
    assert not gone, f"these cycles are gone: remove them from ALLOWED in {__name__}: {gone}"
