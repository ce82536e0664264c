"""``vault verify`` and ``vault stats``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from vault.cli import _dataset_cmds
from vault.cli._common import (
    EXIT_CORRUPT,
    EXIT_USAGE,
    JsonOpt,
    PathArg,
    check_vault_path,
    count,
    emit_json,
    episode_fields,
    exit_with,
    fail,
    leaf_table,
    number,
    open_vault,
    pin_of,
    print_titled,
    progress_bar,
    stdout,
)
from vault.cli._tag import AtOpt

if TYPE_CHECKING:
    from vault import VerifyReport


def verify(
    path: PathArg,
    at: AtOpt = None,
    fingerprint: Annotated[
        str | None,
        typer.Option(
            "--fingerprint",
            metavar="F",
            help="The content fingerprint the data must have (from `vault info PATH --json`).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check the manifest, commit record, every chunk's checksum and the episode index.

    With --at, the data of that commit; with --fingerprint, the data must have that
    fingerprint (the chunk problems then name the arrays and time ranges that differ);
    without --at, the commit that has it is checked (growth since is no problem).
    Exit 0 when the vault is sound, 3 when any problem was found (each one is listed with
    its place), 2 when there is no vault at PATH (or no such commit).
    """
    from vault import is_dataset
    from vault import verify as run_verify

    check_vault_path(path)
    if fingerprint is not None:
        from vault.commits._pins import FINGERPRINT

        if FINGERPRINT.fullmatch(fingerprint) is None:
            fail(
                f"--fingerprint must be a content fingerprint as `vault info PATH --json` gives it "
                f"('sha256:' and 64 hex digits), got {fingerprint!r}",
                EXIT_USAGE,
            )
    if is_dataset(path):
        if fingerprint is not None:
            fail(
                "--fingerprint names one vault's content: pass a shard "
                "(DATASET/shards/NAME) rather than the dataset"
            )
        _dataset_cmds.verify(path, json_out, at)
        return
    with progress_bar("verifying chunks") as progress:
        report = run_verify(path, progress=progress, at=pin_of(at), fingerprint=fingerprint)
    if json_out:
        doc = report.to_dict()
        emit_json(
            {
                "path": doc.pop("location"),
                "ok": doc.pop("ok"),
                "committed": doc.pop("committed_length"),
                **doc,
            }
        )
    else:
        _render_report(report, path)
    if not report.ok:
        exit_with(EXIT_CORRUPT)


def _render_report(report: VerifyReport, shown: str) -> None:
    """The problems and warnings, then one verdict line naming the vault as the user typed
    it (``shown``)."""
    from rich.markup import escape
    from rich.table import Table

    console = stdout()
    for title, items, style in (
        ("problems", report.problems, "red"),
        ("warnings", report.warnings, "yellow"),
    ):
        if not items:
            continue
        table = Table(title=count(len(items), title[:-1]), title_justify="left", title_style=style)
        table.add_column("place", overflow="fold")
        table.add_column(title[:-1], overflow="fold")
        for item in items:
            table.add_row(escape(item.place), escape(item.message))
        console.print(table)
    checked = f"checked {count(report.chunks_checked, 'chunk')}"
    if report.episodes_checked is not None:
        checked += f", {count(report.episodes_checked, 'episode')}"
    length = report.committed_length
    head = f"{escape(shown)}: {'- timesteps' if length is None else count(length, 'timestep')}"
    if report.ok:
        console.print(f"[green]sound[/green]: {head}; {checked}")
    else:
        console.print(
            f"[red]corrupt[/red]: {head}; {checked}; {count(len(report.problems), 'problem')}"
        )


def stats(
    path: PathArg,
    leaf: Annotated[
        list[str] | None,
        typer.Option("--leaf", "-l", help="Leaf path (repeatable); default: every leaf."),
    ] = None,
    at: AtOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per-leaf min / max / mean / std and NaN / Inf counts, streamed chunk by chunk; episode
    return and length statistics when the vault keeps an episode index; --at: of an older
    commit (a dataset's: a tag)."""
    from vault import is_dataset, leaf_stats

    check_vault_path(path)
    if is_dataset(path):
        with progress_bar("computing statistics", bytes_unit=True) as progress:
            _dataset_cmds.stats(path, leaf, json_out, progress, at)
            return
    vault = open_vault(path, at)
    with progress_bar("computing statistics", bytes_unit=True) as progress:
        leaves = leaf_stats(vault, leaves=leaf, progress=progress)
    doc: dict[str, Any] = {
        "path": vault.location,
        "rows": vault.rows,
        "committed": vault.committed_length,
        "leaves": [s.to_dict() for s in leaves],
        **episode_fields(vault),
    }
    if json_out:
        emit_json(doc)
        return
    _render_stats(doc, path)


def _render_stats(doc: dict[str, Any], shown: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = stdout()
    title = f"{escape(shown)}: {count(doc['rows'], 'row')} x {count(doc['committed'], 'timestep')}"
    print_titled(title, leaf_table(doc["leaves"]), console)
    if doc["episodes"] is None:
        return
    console.print(
        f"episodes: {doc['episodes']} complete ({doc['truncated_episodes']} truncated), "
        f"{doc['open_episodes']} open"
    )
    table = Table()
    for col in ("", "min", "max", "mean", "std"):
        table.add_column(col, justify="right" if col else "left")
    for key in ("return", "length"):
        s = doc[f"episode_{key}"]
        if s is None:
            table.add_row(key, "-", "-", "-", "-")
        else:
            table.add_row(key, *(number(s[k]) for k in ("min", "max", "mean", "std")))
    console.print(table)
