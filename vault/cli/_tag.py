"""``vault tag``: name a commit, so that a training run can record exactly the data it used."""

from __future__ import annotations

from typing import Annotated

import typer

from vault.cli._common import JsonOpt, PathArg, emit_json, stdout

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
    `vault verify --at NAME`). Tags never move: setting an existing tag to another commit
    is refused. Needs no writer lock."""
    from vault import Vault

    vault = Vault.open(path, at=pin_of(at))
    commit = vault.tag(name)
    if json_out:
        length = vault.committed_length
        emit_json({"path": path, "tag": name, "commit": commit, "committed": length})
        return
    stdout().print(f"{path}: tag {name} -> commit {commit} ({vault.committed_length} timesteps)")


def pin_of(text: str | None) -> int | str | None:
    """A ``--at`` value: a commit number as an int, anything else (an id, a tag) as given."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text
