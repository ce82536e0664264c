"""The code's shape stays as shared/DESIGN.md sets it: modules of at most 700 lines and classes
of at most 400 in vault/ and buffers/, the import contracts of pyproject.toml (layers, no
cycles, independent storage kinds), and the CLI, tools and examples use the public vault API
only."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def test_import_contracts_hold() -> None:
    """The layers of vault/, its independent storage kinds, no cycle between siblings at any
    depth (imports inside functions count) and buffers/ never importing vault/: the contracts
    in pyproject.toml, checked by import-linter."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


def test_every_vault_subpackage_says_what_it_owns() -> None:
    """Each subpackage's docstring says what it owns and what it may use, in at most 10
    lines."""
    for init in sorted((ROOT / "vault").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(ROOT)} has no docstring"
        assert len(doc.splitlines()) <= 10, f"{init.relative_to(ROOT)}: docstring over 10 lines"
        assert "import" in doc or "use" in doc, (
            f"{init.relative_to(ROOT)}: says nothing of its imports"
        )


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
