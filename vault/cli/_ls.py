"""``vault ls``: the vaults and datasets under a folder, or the shards of a dataset.

A dataset of shards is one entry (kind ``dataset``: its shards, total timesteps, sizes), not
its shards listed as vaults under ``shards/``; ``vault ls DATASET`` lists its shards, each
with its committed length and commit id.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli import _facts
from vault.cli._common import (
    EXIT_NOT_FOUND,
    JsonOpt,
    count,
    emit_json,
    fail,
    human_bytes,
    local_path,
    natural_width,
    one_line,
    open_vault,
    print_titled,
    shards_text,
    stdout,
    typed_storage_error,
)

if TYPE_CHECKING:
    from vault import Dataset


def ls(
    directory: Annotated[
        str,
        typer.Argument(
            metavar="DIR",
            help="Folder (or location) to search, recursively; or a dataset's root (its shards).",
            show_default=False,
        ),
    ] = ".",
    json_out: JsonOpt = False,
) -> None:
    """List every vault and dataset under DIR: path, rows, committed timesteps, episodes,
    sizes, format. A dataset is one entry; `vault ls DATASET` lists its shards (each with
    its committed length and commit id)."""
    from vault import Dataset, find_vaults, is_dataset

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
    if is_dataset(directory):
        _ls_shards(Dataset.open(directory, write_catalog=False), directory, json_out)
        return
    entries: list[dict[str, Any]] = []
    roots: dict[str, bool] = {}  # a candidate dataset root -> whether it is one
    found_all = find_vaults(directory, datasets=True)
    for found in found_all:
        if found.kind == "dataset":  # listed even before its first shard
            roots[found.location.rstrip("/")] = True
    for found in (f for f in found_all if f.kind == "vault"):
        root = _dataset_root(found.location, directory, roots)
        if root is not None and found.problem is None:
            continue  # listed once, as its dataset
        if found.problem is not None:
            entries.append({"path": found.location, "error": found.problem})
            continue
        try:
            entries.append(_facts.summary(open_vault(found.location)))
        except Exception as err:  # a broken vault is listed with its error, never fatal
            entries.append({"path": found.location, "error": _error_text(err)})
    for root in (r for r, yes in roots.items() if yes):
        try:
            entries.append(_facts.dataset_summary(Dataset.open(root, write_catalog=False)))
        except Exception as err:  # a broken dataset is listed with its error, never fatal
            entries.append({"path": root, "kind": "dataset", "error": _error_text(err)})
    entries.sort(key=lambda e: str(e["path"]))
    if json_out:
        emit_json(entries)
        return
    datasets = any(e.get("kind") == "dataset" for e in entries)
    columns = [("path", _path_cell(directory), False), *_COLUMNS]
    title = f"vaults{' and datasets' if datasets else ''} under {directory}"
    _ls_table(entries, title, columns, f"no vaults under {directory}")
    if datasets:
        stdout().print(
            "(a dataset: rows of all its shards, committed from its shortest to its longest "
            "shard; `vault ls DATASET` lists its shards)",
            style="dim",
        )


def _dataset_root(location: str, directory: str, roots: dict[str, bool]) -> str | None:
    """The dataset whose shard the vault at ``location`` is (a dataset under ``directory``,
    not above it), or None; ``roots`` caches which candidates are datasets."""
    from vault import is_dataset, parse_location
    from vault.format._records import SHARDS

    parent, _, _ = location.rstrip("/").rpartition("/")
    if not parent.endswith(f"/{SHARDS}"):
        return None
    root = parent[: -len(SHARDS) - 1]
    base = str(parse_location(directory)).rstrip("/")
    if not root.startswith(f"{base}/"):
        return None  # DIR is inside the dataset (e.g. DATASET/shards): its vaults as such
    if root not in roots:
        roots[root] = is_dataset(root)
    return root if roots[root] else None


def _error_text(err: Exception) -> str:
    shown = typed_storage_error(err) or err
    return f"{type(shown).__name__}: {one_line(shown)}"


def _ls_shards(dataset: Dataset, shown: str, json_out: bool) -> None:
    """The shards of a dataset: each a vault's facts, with its name and commit id."""
    entries = [
        {"shard": name, **_facts.summary(vault), "commit": vault.commit_id}
        for name, vault in dataset.vaults()
    ]
    if json_out:
        emit_json(entries)
        return
    tagged = "" if dataset.tagged is None else f" (tag {dataset.tagged})"
    title = f"{shown}: dataset of {shards_text(len(entries))}, "
    title += count(dataset.timesteps, "timestep") + tagged
    columns = [
        ("shard", lambda e: _escape(e["shard"]), False),
        *_COLUMNS[:2],
        ("commit", lambda e: str(e["commit"]), False),
        *_COLUMNS[2:],
    ]
    _ls_table(entries, title, columns, f"{shown}: a dataset with no shards yet")


def _rows_cell(e: dict[str, Any]) -> str:
    if e.get("kind") == "dataset":
        return str(sum(s["rows"] for s in e["shards"]))
    return str(e["rows"])


def _committed_cell(e: dict[str, Any]) -> str:
    if e.get("kind") != "dataset":
        return str(e["committed"])
    lengths = [s["committed"] for s in e["shards"]] or [0]
    low, high = min(lengths), max(lengths)
    return str(low) if low == high else f"{low}..{high}"


# ``vault ls`` columns after the first (path or shard), most important first: (header, cell
# of an entry, right-justified). On a narrow terminal the last ones are left out, so that no
# cell wraps; a wide one shows all.
_COLUMNS: list[tuple[str, Any, bool]] = [
    ("rows", _rows_cell, True),
    ("committed", _committed_cell, True),
    ("episodes", lambda e: "-" if e["episodes"] is None else str(e["episodes"]), True),
    ("disk", lambda e: human_bytes(e["disk_bytes"]), True),
    ("raw", lambda e: human_bytes(e["raw_bytes"]), True),
    ("created", lambda e: str(e["created"])[:16].replace("T", " "), False),
    ("format", lambda e: str(e["format_version"]), True),
    ("leaves", lambda e: str(e["leaf_count"]), True),
    ("ratio", lambda e: "-" if e["ratio"] is None else f"{e['ratio']:.2f}x", True),
    ("rlvault", lambda e: str(e["rlvault_version"]), False),
]


def _path_cell(directory: str) -> Any:
    def cell(e: dict[str, Any]) -> str:
        path = _escape(_relative(e["path"], directory))
        if e.get("kind") == "dataset" and "shards" in e:
            return f"{path} [dim](dataset, {shards_text(len(e['shards']))})[/dim]"
        return path

    return cell


def _ls_table(entries: list[dict[str, Any]], title: str, columns: list[Any], empty: str) -> None:
    console = stdout()
    if not entries:
        console.print(empty, highlight=False, markup=False)
        return
    for n in range(len(columns), 0, -1):  # as many columns as fit without wrapping
        table = _ls_build(entries, columns[:n])
        if natural_width(console, table) <= console.width:
            break
    else:  # a path wider than the terminal: printed whole (the terminal folds the line)
        from rich.console import Console

        table = _ls_build(entries, columns[:1])
        console = Console(highlight=False, width=natural_width(console, table), soft_wrap=True)
    print_titled(_escape(title), table, console)
    left_out = [name for name, _, _ in columns[n:]]
    if left_out:
        console.print(f"(hidden to fit: {', '.join(left_out)}; see --json)", style="dim")


def _ls_build(entries: list[dict[str, Any]], columns: list[Any]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    broken = any("error" in e for e in entries)
    for name, _, right in columns:
        # a path is never cut or wrapped (one too wide for the terminal runs past its edge)
        wide = {"no_wrap": True, "overflow": "ignore"} if name == "path" else {"no_wrap": True}
        table.add_column(name, justify="right" if right else "left", **wide)
    if broken:
        table.add_column("error", overflow="fold")
    for e in entries:
        first = columns[0][1](e)
        if "error" in e:
            cells = [""] * (len(columns) - 1)
            table.add_row(first, *cells, f"[red]{_escape(e['error'])}[/red]")
            continue
        cells = [cell(e) for _, cell, _ in columns[1:]]
        table.add_row(first, *cells, *([""] if broken else []))
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
