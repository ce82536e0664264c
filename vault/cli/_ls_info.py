"""``vault info`` (``vault ls`` is ``cli/_ls.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vault.cli import _dataset_cmds, _facts
from vault.cli._common import (
    JsonOpt,
    PathArg,
    check_vault_path,
    emit_json,
    human_bytes,
    open_vault,
    pin_of,
    stdout,
)
from vault.cli._tag import AtOpt


def info(
    path: PathArg,
    at: AtOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Structure (leaves, shapes, dtypes, codecs, chunks), sizes, episodes, metadata, writer,
    the commit (with --json its content fingerprint) and tags; --at shows an older commit."""
    from vault import Vault, disk_usage, is_dataset
    from vault.storage._arrays import codec_text

    check_vault_path(path)
    if is_dataset(path):
        _dataset_cmds.info(path, json_out, at)
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
            "codecs": codec_text(leaf.codecs),
            "raw_bytes": committed * rows * leaf.step_bytes,
            "disk_bytes": disk_usage(vault, leaf=leaf.name),
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
    _render_info(doc, manifest.structure, pinned=vault.pinned)


def _render_info(doc: dict[str, Any], structure: dict[str, Any], *, pinned: bool) -> None:
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
        ("disk size", human_bytes(doc["disk_bytes"]) + (" (the whole vault now)" * pinned)),
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
