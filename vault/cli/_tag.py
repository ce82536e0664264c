"""``vault tag``: name a commit, so that a training run can record exactly the data it used."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from vault.cli._common import (
    JsonOpt,
    PathArg,
    check_vault_path,
    count,
    emit_json,
    open_dataset,
    pin_of,
    shards_text,
    stdout,
)

AtOpt = Annotated[
    str | None,
    typer.Option(
        "--at",
        metavar="COMMIT",
        help="A commit number, commit id or tag (default: the latest commit).",
        show_default=False,
    ),
]


def tag(
    path: PathArg,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The tag.", show_default=False)],
    at: AtOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Name a commit NAME (usable wherever a commit is: `Vault.open(PATH, at=NAME)`,
    `vault verify PATH --at NAME`). Tags never move: setting an existing tag to another commit
    is refused. Needs no writer lock. A dataset's root: every shard's commit is tagged
    (`Dataset.open(PATH, at=NAME)` reads the dataset as tagged; --at takes a tag)."""
    from vault import Vault, is_dataset

    check_vault_path(path)
    if is_dataset(path):
        _tag_dataset(path, name, at, json_out)
        return
    vault = Vault.open(path, at=pin_of(at))
    commit = vault.tag(name)
    if json_out:
        length = vault.committed_length
        emit_json({"path": vault.location, "tag": name, "commit": commit, "committed": length})
        return
    stdout().print(
        f"{path}: tag {name} -> commit {commit} ({count(vault.committed_length, 'timestep')})",
        markup=False,
    )


def _tag_dataset(path: str, name: str, at: str | None, json_out: bool) -> None:
    from rich.markup import escape

    dataset = open_dataset(path, at)
    commits = dataset.tag(name)
    shards: list[dict[str, Any]] = [
        {"shard": s, "rows": v.rows, "committed": v.committed_length, "commit": commits[s]}
        for s, v in dataset.vaults()
    ]
    if json_out:
        emit_json(
            {
                "path": dataset.location,
                "kind": "dataset",
                "tag": name,
                "shards": shards,
                "timesteps": dataset.timesteps,
            }
        )
        return
    console = stdout()
    console.print(
        f"{escape(path)}: tag {escape(name)} -> the commits of {shards_text(len(shards))} "
        f"({count(dataset.timesteps, 'timestep')})",
        highlight=False,
    )
    for shard in shards:
        console.print(
            f"  {escape(shard['shard'])}: commit {shard['commit']} "
            f"({count(shard['committed'], 'timestep')})",
            highlight=False,
        )
