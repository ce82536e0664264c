"""``vault ls`` and ``vault info``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from vault.cli import _dataset_cmds, _facts
from vault.cli._common import (
    EXIT_NOT_FOUND,
    JsonOpt,
    PathArg,
    check_vault_path,
    emit_json,
    fail,
    human_bytes,
    local_path,
    natural_width,
    one_line,
    open_vault,
    stdout,
    typed_storage_error,
)
from vault.cli._tag import AtOpt, pin_of


def ls(
    directory: Annotated[
        str,
        typer.Argument(
            metavar="DIR", help="Folder (or location) to search, recursively.", show_default=False
        ),
    ] = ".",
    json_out: JsonOpt = False,
) -> None:
    """List every vault under DIR: path, rows, committed timesteps, episodes, sizes, format."""
    from vault import find_vaults

    folder = local_path(directory)
    if folder is not None and not folder.exists():
        fail(
            f"{directory}: no such file or directory; pass a folder that exists "
            "(`vault ls` alone searches the current one)",
            EXIT_NOT_FOUND,
        )
    if folder is not None and not folder.is_dir():
        fail(
            f"{directory} is a file, not a folder; `vault ls` searches a folder "
            "(pass the folder that holds your vaults)",
            EXIT_NOT_FOUND,
        )
    entries: list[dict[str, Any]] = []
    for found in find_vaults(directory):
        if found.problem is not None:
            entries.append({"path": found.location, "error": found.problem})
            continue
        try:
            vault = open_vault(found.location)
            entries.append(_facts.summary(vault))
        except Exception as err:  # a broken vault is listed with its error, never fatal
            shown = typed_storage_error(err) or err
            entries.append(
                {"path": found.location, "error": f"{type(shown).__name__}: {one_line(shown)}"}
            )
    if json_out:
        emit_json(entries)
        return
    _ls_table(entries, directory)


# ``vault ls`` columns, most important first: (header, cell of an entry, right-justified).
# On a narrow terminal the last ones are left out, so that no cell wraps; a wide one shows all.
_LS_COLUMNS: list[tuple[str, Any, bool]] = [
    ("path", None, False),
    ("rows", lambda e: str(e["rows"]), True),
    ("committed", lambda e: str(e["committed"]), True),
    ("episodes", lambda e: "-" if e["episodes"] is None else str(e["episodes"]), True),
    ("disk", lambda e: human_bytes(e["disk_bytes"]), True),
    ("raw", lambda e: human_bytes(e["raw_bytes"]), True),
    ("created", lambda e: str(e["created"])[:16].replace("T", " "), False),
    ("format", lambda e: str(e["format_version"]), True),
    ("leaves", lambda e: str(e["leaf_count"]), True),
    ("ratio", lambda e: "-" if e["ratio"] is None else f"{e['ratio']:.2f}x", True),
    ("rlvault", lambda e: str(e["rlvault_version"]), False),
]


def _ls_table(entries: list[dict[str, Any]], directory: str) -> None:
    console = stdout()
    if not entries:
        console.print(f"no vaults under {directory}")
        return
    for n in range(len(_LS_COLUMNS), 1, -1):  # as many columns as fit without wrapping
        table = _ls_build(entries, directory, _LS_COLUMNS[:n])
        if natural_width(console, table) <= console.width:
            break
    console.print(table)
    left_out = [name for name, _, _ in _LS_COLUMNS[n:]]
    if left_out:
        console.print(f"(hidden to fit: {', '.join(left_out)}; see --json)", style="dim")


def _ls_build(entries: list[dict[str, Any]], directory: str, columns: list[Any]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=f"vaults under {directory}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    broken = any("error" in e for e in entries)
    for name, _, right in columns:
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "path")
    if broken:
        table.add_column("error", overflow="fold")
    for e in entries:
        path = _escape(_relative(e["path"], directory))
        if "error" in e:
            cells = [""] * (len(columns) - 1)
            table.add_row(path, *cells, f"[red]{_escape(e['error'])}[/red]")
            continue
        cells = [cell(e) for _, cell, _ in columns[1:]]
        table.add_row(path, *cells, *([""] if broken else []))
    return table


def _relative(location: str, under: str) -> str:
    """``location`` relative to the searched ``under`` (as given, relative or absolute)."""
    folder = local_path(under)
    if folder is not None:
        return os.path.relpath(location, folder)
    base = under.rstrip("/")
    inside = location.rstrip("/")
    if inside == base:
        return "."
    return inside[len(base) + 1 :] if inside.startswith(base + "/") else location


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def info(
    path: PathArg,
    at: AtOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Structure (leaves, shapes, dtypes, codecs, chunks), sizes, episodes, metadata, writer,
    the commit (with --json its content fingerprint) and tags; --at shows an older commit."""
    from vault import Vault, disk_usage, is_dataset

    check_vault_path(path)
    if is_dataset(path):
        if at is not None:
            fail("--at names one vault's commit: pass a shard (DATASET/shards/NAME)")
        _dataset_cmds.info(path, json_out)
        return
    vault = open_vault(path) if at is None else Vault.open(path, at=pin_of(at))
    doc = _facts.summary(vault)
    doc["commit"] = vault.commit_id
    doc["tags"] = vault.tags()
    if json_out:
        doc["fingerprint"] = vault.fingerprint()
    manifest = vault.manifest
    rows, committed = vault.rows, vault.committed_length
    doc["leaves"] = [
        {
            "name": leaf.name,
            "shape": [rows, committed, *leaf.shape],
            "dtype": leaf.dtype,
            "chunk": list(leaf.chunk),
            "codecs": _facts.codec_text(leaf.codecs),
            "raw_bytes": committed * rows * leaf.step_bytes,
            "disk_bytes": disk_usage(vault.location, leaf=leaf.name),
        }
        for leaf in manifest.leaves
    ]
    doc["seams"] = [seam.to_json() for seam in vault.seams]
    doc["user_metadata"] = vault.metadata
    doc["writer"] = _facts.writer(vault)
    doc["episode_leaves"] = vault.episode_leaves if vault.has_episodes else None
    if json_out:
        emit_json(doc)
        return
    _render_info(doc, manifest.structure)


def _render_info(doc: dict[str, Any], structure: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.tree import Tree

    console = stdout()
    tree = Tree(f"[bold]{escape(doc['path'])}[/bold]  experience")
    _add_nodes(tree, structure, iter(doc["leaves"]), console.width, 1)
    console.print(tree)
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    ratio = "-" if doc["ratio"] is None else f"{doc['ratio']:.2f}x"
    rows = [
        ("rows", str(doc["rows"])),
        ("committed timesteps", str(doc["committed"])),
        ("episodes", _episodes_text(doc)),
        ("raw size", human_bytes(doc["raw_bytes"])),
        ("disk size", human_bytes(doc["disk_bytes"])),
        ("compression", ratio),
        ("format version", str(doc["format_version"])),
        ("rlvault version", str(doc["rlvault_version"])),
        ("created", str(doc["created"])),
        ("writer holds it", _facts.describe_holder(doc["writer"])),
        ("commit", str(doc["commit"])),
    ]
    if doc["tags"]:
        rows.append(("tags", ", ".join(f"{k} ({v})" for k, v in doc["tags"].items())))
    if doc["seams"]:
        seams = ", ".join(
            f"{s['lost']} lost at t={s['at']}" if s["lost"] else f"restart at t={s['at']}"
            for s in doc["seams"]
        )
        rows.append(("seams", seams))
    if doc["episode_leaves"]:
        named = ", ".join(f"{k}={v}" for k, v in doc["episode_leaves"].items() if v)
        rows.append(("episode leaves", named))
    for key, value in rows:
        facts.add_row(key, escape(value))
    console.print(facts)
    if doc["user_metadata"]:
        from rich.json import JSON

        console.print("[bold]user metadata[/bold]")
        console.print(JSON.from_data(doc["user_metadata"]))
    else:
        console.print("[bold]user metadata[/bold]  (none)")


def _episodes_text(doc: dict[str, Any]) -> str:
    if doc["episodes"] is None:
        return "no episode index"
    return f"{doc['episodes']} complete, {doc['open_episodes']} open"


def _add_nodes(
    parent: Any, node: dict[str, Any], leaves: Iterator[dict[str, Any]], width: int, depth: int
) -> None:
    """Add ``node``'s children under ``parent`` (at tree ``depth``, each level indented by 4
    columns). ``leaves`` yields the leaves' facts in the manifest's order, which is the
    structure's depth-first leaf order."""
    from rich.markup import escape

    kind = node["kind"]
    children = node.get("children", [])
    room = width - 4 * depth
    if kind == "leaf":  # the whole structure is one leaf
        parent.add(_leaf_label("", next(leaves), room))
        return
    if kind == "dict":
        labels = [str(k) for k in node["keys"]]
    elif kind in ("namedtuple", "dataclass"):
        labels = [str(f) for f in node["fields"]]
    else:
        labels = [f"[{i}]" for i in range(len(children))]
    for label, child in zip(labels, children, strict=True):
        if child["kind"] == "leaf":
            parent.add(_leaf_label(label, next(leaves), room))
        elif child["kind"] == "none":
            parent.add(f"{escape(label)}  None")
        else:
            cls = child.get("class", child["kind"]).rpartition(":")[2]
            branch = parent.add(f"[bold]{escape(label)}[/bold]  ({escape(cls)})")
            _add_nodes(branch, child, leaves, width, depth + 1)


def _leaf_label(label: str, leaf: dict[str, Any], room: int) -> Any:
    """One line per leaf where it fits in ``room`` columns, else two (what it holds; how it
    is stored), so that nothing wraps mid-word on a narrow terminal."""
    from rich.text import Text

    shape = ", ".join(map(str, leaf["shape"]))
    holds = f"{leaf['dtype']} [{shape}]"
    sizes = f"raw {human_bytes(leaf['raw_bytes'])}, disk {human_bytes(leaf['disk_bytes'])}"
    stored = f"chunk {leaf['chunk']}  {leaf['codecs']}"
    text = Text(label, style="cyan")
    one_line = f"{label}  {holds}  {stored}  {sizes}"
    if len(one_line) <= room:
        text.append(f"  {holds}  {stored}  {sizes}")
    else:
        text.append(f"  {holds}  {sizes}\n{stored}")
    return text
