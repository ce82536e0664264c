"""The code's shape stays as shared/DESIGN.md sets it: modules of at most 700 lines and classes
of at most 400 in vault/ and buffers/, no import cycle inside vault/ (imports inside functions
count), and the CLI, tools and examples use the public vault API only."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_modules_and_classes_stay_small() -> None:
    too_long = []
    for package in ("vault", "buffers"):
        for path in modules(package):
            lines = path.read_text().count("\n")
            if lines > 700:
                too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > 400:
                        too_long.append(f"{path.relative_to(ROOT)}: class {node.name} {size}")
    assert not too_long


def _name_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The vault modules ``path`` imports anywhere in it (``from vault import x`` counts as
    ``vault.x`` where that is a module, else as the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    out.add(full)
                elif node.module in known:
                    out.add(node.module)
    return out


def test_no_import_cycle_inside_vault() -> None:
    paths = {_name_of(p): p for p in modules("vault")}
    known = set(paths)
    graph = {name: _imports(path, known) - {name} for name, path in paths.items()}
    # the package's __init__ only re-exports lazily (by name, on first use): not an edge
    graph["vault"] = set()
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles


def test_cli_tools_and_examples_use_public_names_only() -> None:
    private = []
    for folder in ("vault/cli", "tools", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                bad = [n for n in names if n.startswith(("vault._", "vault.cli._"))]
                if folder == "vault/cli":
                    bad = [n for n in bad if not n.startswith("vault.cli._")]
                if bad:
                    private.append(f"{path.relative_to(ROOT)}: {bad[0]}")
    assert not private
