"""Every public name has the docstring the API reference is generated from (docs/api/).

The public names are those in ``vault.__all__``, ``buffers.__all__`` and
``vault.converters.__all__``; most are defined in private modules (``vault/facade/_vault.py``),
which ruff's pydocstyle rules treat as private, so this test reads them as mkdocstrings does
(griffe, Google style) and asks of each: a one-line summary; for a function or method, every
parameter under ``Args`` and, when it returns something, a ``Returns`` (or ``Yields``)
section (or, as Google's guide allows, a summary that starts with "Returns"); for a class,
its public methods likewise and its public fields under ``Attributes``
(or with a docstring of their own); no warning from the docstring parser (a documented
parameter that is not in the signature, a malformed section). The ``Example`` sections run as
doctests.
"""

from __future__ import annotations

import doctest
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe
import pytest

import buffers
import vault
from vault import converters

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"vault": vault, "buffers": buffers, "vault.converters": converters}


def _members(obj: Any) -> Any:
    return obj.final_target if obj.is_alias else obj


def _missing(obj: Any, where: str) -> list[str]:
    """What the docstring of ``obj`` (a griffe object) lacks, one line per gap."""
    obj = _members(obj)
    doc = obj.docstring
    if doc is None or not doc.value.strip():
        return [f"{where}: no docstring"]
    gaps = []
    lines = doc.value.strip().splitlines()
    if len(lines) > 1 and lines[1].strip():
        gaps.append(f"{where}: the summary is more than one line")
    sections = {section.kind.value: section for section in doc.parsed}
    if obj.is_function:
        documented = {p.name.lstrip("*") for p in getattr(sections.get("parameters"), "value", [])}
        undocumented = [
            p.name
            for p in obj.parameters
            if p.name not in ("self", "cls") and p.name.lstrip("*") not in documented
        ]
        if undocumented:
            gaps.append(f"{where}: parameters not under Args: {undocumented}")
        returns = obj.returns is not None and str(obj.returns) not in ("None", "NoReturn")
        if (
            returns
            and obj.name != "__init__"
            and "property" not in obj.labels
            and not {"returns", "yields"} & set(sections)
            and not lines[0].startswith(("Returns ", "Yields "))  # Google's one-line form
        ):
            gaps.append(f"{where}: no Returns section (returns {obj.returns})")
    if obj.is_class:  # its own members and those it inherits (a mixin's methods)
        for name, member in obj.all_members.items():
            member = _members(member)
            if name.startswith("_"):
                continue
            if member.is_function:
                gaps += _missing(member, f"{where}.{name}")
            elif (
                member.is_attribute
                and member.docstring is None
                and name not in _attributes(member.parent)  # the defining class's section
            ):
                gaps.append(f"{where}.{name}: not under Attributes and no docstring")
    return gaps


def _attributes(cls: Any) -> set[str]:
    """The names under the ``Attributes`` section of ``cls``'s docstring."""
    sections = cls.docstring.parsed if cls.docstring is not None else []
    return {a.name for s in sections if s.kind.value == "attributes" for a in s.value}


def _public(package: griffe.Module) -> Iterator[tuple[str, Any]]:
    for name in PUBLIC[package.path].__all__:
        yield f"{package.path}.{name}", package[name]


@pytest.fixture(scope="module")
def loaded() -> list[griffe.Module]:
    load = {
        "search_paths": [str(ROOT)],
        "docstring_parser": "google",
        # as mkdocs.yml sets them: a Returns section is one description, as Google's guide has
        "docstring_options": {"returns_multiple_items": False, "returns_named_value": False},
        "resolve_aliases": True,
    }
    top = {name: griffe.load(name, resolve_external=False, **load) for name in ("vault", "buffers")}
    return [top["vault"], top["vault"]["converters"], top["buffers"]]


def test_every_public_name_has_a_full_docstring(
    loaded: list[griffe.Module], caplog: pytest.LogCaptureFixture
) -> None:
    gaps: list[str] = []
    with caplog.at_level(logging.WARNING, logger="griffe"):
        for package in loaded:
            for where, obj in _public(package):
                gaps += _missing(obj, where)
    assert gaps == []
    assert [r.getMessage() for r in caplog.records] == []  # the parser found nothing odd


def test_the_check_finds_each_gap() -> None:
    code = '''
class Thing:
    """A thing.

    Attributes:
        size: how big.
    """

    size: int
    colour: str

    def grow(self, by: int) -> int:
        """Grow."""
        return by


def make(n: int, *, fast: bool = False) -> Thing:
    """Make a thing
    of size n.

    Args:
        n: the size.
    """
    return Thing()


def silent() -> None:
    pass
'''
    with griffe.temporary_visited_module(code, docstring_parser="google") as module:
        gaps = [gap for name in ("Thing", "make", "silent") for gap in _missing(module[name], name)]
    assert gaps == [
        "Thing.colour: not under Attributes and no docstring",
        "Thing.grow: parameters not under Args: ['by']",
        "Thing.grow: no Returns section (returns int)",
        "make: the summary is more than one line",
        "make: parameters not under Args: ['fast']",
        "make: no Returns section (returns Thing)",
        "silent: no docstring",
    ]


def _examples() -> list[doctest.DocTest]:
    """The examples of every public name, and of the methods a public class inherits from
    this project's mixins (``Vault.read`` lives in ``ReadMethods``), each once."""
    finder = doctest.DocTestFinder(recurse=True, exclude_empty=True)
    found: dict[tuple[str | None, str | None], doctest.DocTest] = {}
    for module_name, module in PUBLIC.items():
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type(vault)):
                continue  # a module of buffers (its names are checked where exported)
            ours = [obj]
            if isinstance(obj, type):  # the class and this project's classes it inherits from
                ours = [c for c in obj.__mro__ if c.__module__.split(".")[0] in PUBLIC]
            for part in ours:
                label = f"{module_name}.{name}"
                for test in finder.find(part, label, module=False, globs={}):
                    test.name = label + test.name[len(label) :]
                    found.setdefault((test.filename, test.docstring), test)
    return [t for t in found.values() if t.examples]


@pytest.mark.parametrize("example", _examples(), ids=lambda t: t.name)
def test_docstring_examples_run(
    example: doctest.DocTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write a vault write it here
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(example, out=lambda text: pytest.fail(text, pytrace=False))
    assert runner.summarize(verbose=False).failed == 0


def _pages() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / "docs" / "api").glob("*.md"))}


# module functions whose contracts public docstrings send readers to (a buffer binds them)
REFERENCED = {
    "buffers.prioritised_trajectory_buffer.set_priorities",
    "buffers.episode_buffer.episode_state_from",
}


def test_every_public_name_is_on_an_api_page() -> None:
    """docs/api/*.md render each name of the three ``__all__`` lists (``::: vault.Vault``),
    and the module functions of ``REFERENCED``."""
    rendered = {m for text in _pages().values() for m in re.findall(r"^::: (\S+)$", text, re.M)}
    wanted = {f"{prefix}.{name}" for prefix, module in PUBLIC.items() for name in module.__all__}
    assert sorted((wanted | REFERENCED) - rendered) == []
    assert sorted(rendered - wanted - REFERENCED) == []  # nothing private, nothing gone


def test_member_lists_on_the_api_pages_are_complete() -> None:
    """Where a page lists a class's members (to order them), it lists every public one."""
    for text in _pages().values():
        for path, block in re.findall(r"^::: (\S+)\n((?:    .*\n)+)", text, re.M):
            if "members:\n" not in block or "members: false" in block:
                continue
            listed = re.findall(r"^        - (\w+)$", block, re.M)
            prefix, name = path.rsplit(".", 1)
            cls = getattr(PUBLIC[prefix], name)
            public = {n for n in dir(cls) if not n.startswith("_")}
            assert sorted(public - set(listed)) == [], path
            assert len(listed) == len(set(listed)), path
            assert set(listed) <= public, path
