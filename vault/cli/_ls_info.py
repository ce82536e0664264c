"""``vault ls`` and ``vault info``."""

from __future__ import annotations

import os
from pathlib import Path
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
    one_line,
    open_vault,
    stdout,
)


def ls(
    directory: Annotated[
        Path,
        typer.Argument(metavar="DIR", help="Folder to search (recursively).", show_default=False),
    ] = Path("."),
    json_out: JsonOpt = False,
) -> None:
    """List every vault under DIR: path, rows, committed timesteps, episodes, sizes, format."""
    if not directory.exists():
        fail(f"{directory}: no such file or directory", EXIT_NOT_FOUND)
    if not directory.is_dir():
        fail(f"{directory}: not a directory", EXIT_NOT_FOUND)
    entries: list[dict[str, Any]] = []
    for path, broken in _facts.find_vaults(directory):
        if broken is not None:
            entries.append({"path": str(path), "error": broken})
            continue
        try:
            vault = open_vault(str(path))
            entries.append(_facts.summary(vault))
        except Exception as err:  # a broken vault is listed with its error, never fatal
            entries.append({"path": str(path), "error": f"{type(err).__name__}: {one_line(err)}"})
    if json_out:
        emit_json(entries)
        return
    _ls_table(entries, directory)


def _ls_table(entries: list[dict[str, Any]], directory: Path) -> None:
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
        path = _escape(os.path.relpath(e["path"], directory))
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


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def info(
    path: PathArg,
    json_out: JsonOpt = False,
) -> None:
    """Structure (leaves, shapes, dtypes, codecs, chunks), sizes, episodes, metadata, writer."""
    vault = open_vault(path)
    doc = _facts.summary(vault)
    manifest = vault.manifest
    local = not vault.location.startswith("memory://")
    leaves = []
    for leaf in manifest["leaves"]:
        leaf_dir = os.path.join(vault.location, "experience", leaf["name"])
        leaves.append(
            {
                "name": leaf["name"],
                "shape": [vault.rows, vault.committed_length, *leaf["shape"]],
                "dtype": leaf["dtype"],
                "chunk": leaf["chunk"],
                "codecs": _facts.codec_text(leaf["codecs"]),
                "raw_bytes": vault.committed_length * vault.rows * _facts.step_bytes(leaf),
                "disk_bytes": _facts.disk_bytes(leaf_dir) if local else None,
            }
        )
    doc["leaves"] = leaves
    doc["gaps"] = vault.gaps
    doc["user_metadata"] = vault.metadata
    doc["writer"] = _facts.writer(vault.location) if local else {"held": None, "holder": None}
    doc["episode_leaves"] = getattr(vault, "episode_leaves", None) if doc["episodes"] else None
    if json_out:
        emit_json(doc)
        return
    _render_info(doc, manifest["structure"])


def _render_info(doc: dict[str, Any], structure: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.tree import Tree

    console = stdout()
    by_name = {leaf["name"]: leaf for leaf in doc["leaves"]}
    tree = Tree(f"[bold]{escape(doc['path'])}[/bold]  experience")
    _add_nodes(tree, structure, "", by_name)
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
        (
            "writer holds it",
            _facts.describe_holder(doc["writer"]) if doc["writer"]["held"] is not None else "-",
        ),
    ]
    if doc["gaps"]:
        seams = ", ".join(
            f"{g['lost']} lost at t={g['at']}" if g["lost"] else f"restart at t={g['at']}"
            for g in doc["gaps"]
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


def _add_nodes(parent: Any, node: dict[str, Any], prefix: str, leaves: dict[str, Any]) -> None:
    from rich.markup import escape

    from vault._structure import escape as key_escape

    kind = node["kind"]
    if kind == "dict":
        labels = [(key_escape(k), k) for k in node["keys"]]
    elif kind in ("namedtuple", "dataclass"):
        labels = [(f, f) for f in node["fields"]]
    else:
        labels = [(str(i), f"[{i}]") for i in range(len(node.get("children", [])))]
    for (part, label), child in zip(labels, node.get("children", []), strict=True):
        path = f"{prefix}/{part}" if prefix else part
        if child["kind"] == "leaf":
            leaf = leaves[path]
            shape = ", ".join(map(str, leaf["shape"]))
            parent.add(
                f"[cyan]{escape(label)}[/cyan]  {leaf['dtype']} [{shape}]  "
                f"chunk {leaf['chunk']}  {escape(leaf['codecs'])}  "
                f"raw {human_bytes(leaf['raw_bytes'])}, disk {human_bytes(leaf['disk_bytes'])}"
            )
        elif child["kind"] == "none":
            parent.add(f"{escape(label)}  None")
        else:
            cls = child.get("class", child["kind"]).rpartition(":")[2]
            branch = parent.add(f"[bold]{escape(label)}[/bold]  ({escape(cls)})")
            _add_nodes(branch, child, path, leaves)
