"""``vault ls`` and ``vault info``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from vault.cli import _facts
from vault.cli._common import (
    EXIT_NOT_FOUND,
    JsonOpt,
    PathArg,
    emit_json,
    fail,
    human_bytes,
    local_path,
    one_line,
    open_vault,
    stdout,
    typed_storage_error,
)


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


def _ls_table(entries: list[dict[str, Any]], directory: str) -> None:
    from rich.table import Table

    console = stdout()
    if not entries:
        console.print(f"no vaults under {directory}")
        return
    table = Table(title=f"vaults under {directory}", title_justify="left")
    columns = ["path", "rows", "committed", "episodes", "raw", "disk", "format", "created"]
    broken = any("error" in e for e in entries)
    for name in [*columns, "error"] if broken else columns:
        numeric = name in ("rows", "committed", "episodes", "raw", "disk", "format")
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for e in entries:
        path = _escape(_relative(e["path"], directory))
        if "error" in e:
            table.add_row(path, *[""] * (len(columns) - 1), f"[red]{_escape(e['error'])}[/red]")
            continue
        cells = [
            str(e["rows"]),
            str(e["committed"]),
            "-" if e["episodes"] is None else str(e["episodes"]),
            human_bytes(e["raw_bytes"]),
            human_bytes(e["disk_bytes"]),
            str(e["format_version"]),
            str(e["created"])[:19].replace("T", " "),
        ]
        table.add_row(path, *cells, *([""] if broken else []))
    console.print(table)


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
    json_out: JsonOpt = False,
) -> None:
    """Structure (leaves, shapes, dtypes, codecs, chunks), sizes, episodes, metadata, writer."""
    from vault import disk_usage

    vault = open_vault(path)
    doc = _facts.summary(vault)
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
    doc["gaps"] = [seam.to_json() for seam in vault.seams]  # the seams; key kept for scripts
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
    _add_nodes(tree, structure, iter(doc["leaves"]))
    console.print(tree)
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    ratio = "-" if doc["ratio"] is None else f"{doc['ratio']:.2f}x"
    rows = [
        ("rows", str(doc["rows"])),
        ("committed timesteps", str(doc["committed"])),
        ("episodes", "no episode index" if doc["episodes"] is None else str(doc["episodes"])),
        ("raw size", human_bytes(doc["raw_bytes"])),
        ("disk size", human_bytes(doc["disk_bytes"])),
        ("compression", ratio),
        ("format version", str(doc["format_version"])),
        ("rlvault version", str(doc["rlvault_version"])),
        ("created", str(doc["created"])),
        ("writer holds it", _facts.describe_holder(doc["writer"])),
    ]
    if doc["gaps"]:
        seams = ", ".join(
            f"{s['lost']} lost at t={s['at']}" if s["lost"] else f"restart at t={s['at']}"
            for s in doc["gaps"]
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


def _add_nodes(parent: Any, node: dict[str, Any], leaves: Iterator[dict[str, Any]]) -> None:
    """Add ``node``'s children under ``parent``. ``leaves`` yields the leaves' facts in the
    manifest's order, which is the structure's depth-first leaf order."""
    from rich.markup import escape

    kind = node["kind"]
    children = node.get("children", [])
    if kind == "leaf":  # the whole structure is one leaf
        parent.add(_leaf_label("", next(leaves)))
        return
    if kind == "dict":
        labels = [str(k) for k in node["keys"]]
    elif kind in ("namedtuple", "dataclass"):
        labels = [str(f) for f in node["fields"]]
    else:
        labels = [f"[{i}]" for i in range(len(children))]
    for label, child in zip(labels, children, strict=True):
        if child["kind"] == "leaf":
            parent.add(_leaf_label(label, next(leaves)))
        elif child["kind"] == "none":
            parent.add(f"{escape(label)}  None")
        else:
            cls = child.get("class", child["kind"]).rpartition(":")[2]
            branch = parent.add(f"[bold]{escape(label)}[/bold]  ({escape(cls)})")
            _add_nodes(branch, child, leaves)


def _leaf_label(label: str, leaf: dict[str, Any]) -> str:
    from rich.markup import escape

    shape = ", ".join(map(str, leaf["shape"]))
    return (
        f"[cyan]{escape(label)}[/cyan]  {leaf['dtype']} [{shape}]  "
        f"chunk {leaf['chunk']}  {escape(leaf['codecs'])}  "
        f"raw {human_bytes(leaf['raw_bytes'])}, disk {human_bytes(leaf['disk_bytes'])}"
    )
