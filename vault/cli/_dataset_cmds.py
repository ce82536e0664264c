"""``vault info``, ``verify``, ``stats`` and ``episodes`` of a dataset of shards (a root
made by ``vault.Dataset.create``): the commands call these when PATH is a dataset."""

from __future__ import annotations

from typing import Any

from vault.cli._common import (
    EXIT_CORRUPT,
    count,
    emit_json,
    episode_fields,
    exit_with,
    fail,
    leaf_table,
    open_dataset,
    print_titled,
    shards_text,
    stdout,
)


def _shard_rows(dataset: Any) -> list[dict[str, Any]]:
    return list(dataset.describe()["shards"])


def info(path: str, json_out: bool, at: str | None = None) -> None:
    dataset = open_dataset(path, at)
    doc = dataset.describe()
    if at is not None:
        doc["tag"] = at
    template = dataset.template
    doc["leaves"] = [
        {"name": leaf.name, "shape": list(leaf.shape), "dtype": leaf.dtype}
        for leaf in template.leaves
    ]
    doc["episode_leaves"] = None if template.episodes is None else dict(template.episodes.to_json())
    if json_out:
        emit_json(doc)
        return
    _render_shards(path, doc, "dataset" if at is None else f"dataset at tag {at}")
    leaves = ", ".join(f"{leaf['name']} {leaf['dtype']} {leaf['shape']}" for leaf in doc["leaves"])
    stdout().print(f"leaves (per row and timestep): {leaves}", highlight=False, markup=False)


def _render_shards(shown: str, doc: dict[str, Any], what: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    shards = doc["shards"]
    title = (
        f"{escape(shown)}: {what} of {shards_text(len(shards))}, "
        f"{count(doc['timesteps'], 'timestep')}"
    )
    table = Table()
    for col in ("shard", "rows", "committed", "commit"):
        table.add_column(col, justify="left" if col in ("shard", "commit") else "right")
    for shard in shards:
        table.add_row(
            escape(shard["shard"]), str(shard["rows"]), str(shard["committed"]), shard["commit"]
        )
    print_titled(title, table)


def verify(path: str, json_out: bool, at: str | None = None) -> None:
    """Every shard verified (with ``at``, a tag: every shard that has it, at its tagged
    commit); exit 3 when any has a problem."""
    from vault import verify as run_verify

    dataset = open_dataset(path, at)
    shards = []
    for name, vault in dataset.vaults():
        report = run_verify(vault, at=at)
        shards.append(
            {
                "shard": name,
                "ok": report.ok,
                "committed": report.committed_length,
                "chunks_checked": report.chunks_checked,
                "problems": [{"place": p.place, "message": p.message} for p in report.problems],
            }
        )
    catalog = dataset.check_catalog()
    ok = all(s["ok"] for s in shards) and not catalog["problems"]
    if json_out:
        emit_json(
            {
                "path": dataset.location,
                "kind": "dataset",
                "ok": ok,
                "timesteps": dataset.timesteps,
                "shards": shards,
                "catalog": catalog,
            }
        )
    else:
        _render_verify(path if at is None else f"{path} at tag {at}", shards, ok, catalog)
    if not ok:
        exit_with(EXIT_CORRUPT)


def _render_verify(
    shown: str, shards: list[dict[str, Any]], ok: bool, catalog: dict[str, Any]
) -> None:
    from rich.markup import escape

    console = stdout()
    for shard in shards:
        for problem in shard["problems"]:
            console.print(
                f"[red]{escape(shard['shard'])}[/red] {escape(problem['place'])}: "
                f"{escape(problem['message'])}"
            )
    for problem in catalog["problems"]:
        console.print(
            f"[red]catalog[/red]: {escape(problem)}; delete {escape(shown)}/catalog (readers "
            "rebuild it from the shards)"
        )
    if catalog["state"] == "damaged":
        console.print("catalog: damaged, so ignored (the next reader rewrites it)", style="dim")
    bad = sum(not s["ok"] for s in shards)
    chunks = sum(s["chunks_checked"] for s in shards)
    head = f"{escape(shown)}: {shards_text(len(shards))}; checked {count(chunks, 'chunk')}"
    if ok:
        console.print(f"[green]sound[/green]: {head}")
    else:
        console.print(f"[red]corrupt[/red]: {head}; {shards_text(bad)} with problems")


def stats(
    path: str, leaves: list[str] | None, json_out: bool, progress: Any, at: str | None = None
) -> None:
    from vault import leaf_stats

    dataset = open_dataset(path, at)
    found = leaf_stats(dataset, leaves=leaves, progress=progress)
    doc: dict[str, Any] = {
        "path": dataset.location,
        "kind": "dataset",
        "shards": _shard_rows(dataset),
        "timesteps": dataset.timesteps,
        "leaves": [s.to_dict() for s in found],
        **episode_fields(dataset),
    }
    if json_out:
        emit_json(doc)
        return
    from rich.markup import escape

    console = stdout()
    title = (
        f"{escape(path)}: {shards_text(len(doc['shards']))}, {count(doc['timesteps'], 'timestep')}"
    )
    print_titled(title, leaf_table(doc["leaves"]), console)
    if doc["episodes"] is not None:
        console.print(
            f"episodes: {doc['episodes']} complete ({doc['truncated_episodes']} truncated), "
            f"{doc['open_episodes']} open"
        )


def episodes(
    path: str,
    sort: str | None,
    ascending: bool,
    head: int,
    include_open: bool,
    json_out: bool,
    at: str | None = None,
) -> None:
    from vault import episode_stats

    dataset = open_dataset(path, at)
    if not dataset.has_episodes:
        fail(f"{path} keeps no episode index (its shards were created without done_leaf)")
    table = dataset.episodes(include_open=include_open)
    total = len(table)
    if sort is not None:
        table = table.sort(by=sort, descending=not ascending)
    shown = table if head == 0 else table[: min(head, total)]
    records = shown.to_records()
    counted = episode_stats(dataset.episodes(include_open=True))
    counts = {"episodes": counted["complete"], "open_episodes": counted["open"]}
    if json_out:
        emit_json({"path": dataset.location, "kind": "dataset", **counts, "records": records})
        return
    from vault.cli._episode_table import render_episode_table

    render_episode_table(path, records, total, counts, shards=len(dataset.shards))
