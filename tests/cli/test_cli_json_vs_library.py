"""``vault ... --json`` against the library it fronts, value by value, at every commit.

One small vault is built once per module with five commits after its creation: two appends,
a ``write(state, new_buffer=True)`` of a buffer new to the vault (a seam, lost 0), another
append, and an ``append(..., continues=False)`` (a second seam). Its values say where they
belong (``obs = (1000 * row + g, -(1000 * row + g))`` for the g-th timestep written, small
integer rewards so that returns are exact), so what a command prints at a pinned commit
(``--at`` a commit number, a commit id, a tag) is compared both with a trivially correct model
(numpy on the model's arrays cut at the pinned length, episodes found by walking the done
flags) and with the Python API (``Vault.open(path, at=...)``: ``fingerprint``, ``tags``,
``seams``, ``episodes``, ``leaf_stats``, ``read_numpy``). The pins all have later appends, so
a command that read past the pinned length, or the latest commit's index, shows.

Also: ``slice`` / ``combine`` / ``subsample`` / ``export`` / ``ls`` JSON against the vault
(file) they wrote and the model; a vault of tuples, lists, a named tuple and dict keys with
spaces, dots, ``/`` and ``%`` (escaped leaf names) at a pin; a dataset of shards read at a tag
after a shard grew and another joined; the human output saying the same numbers (and paths)
as the JSON; non-finite values in ``show --json``; and ``--at`` values that are wrong
(malformed, absent) giving one ``vault: ...`` line with the documented exit code (1 usage,
2 not found) and never the "a bug in rlvault" line.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from _cli_vaults import Cli, one_error_line

import buffers as fbx
from vault import Dataset, Vault, leaf_stats, verify

ROWS = 2
CHUNK_T = 4  # a pinned length cuts a chunk that later appends fill
LEAVES = ("done", "obs", "reward", "trunc")
# (how, timesteps) per commit after the creation; the g-th timestep written holds data(g)
WRITES = (("append", 5), ("append", 6), ("new_buffer", 3), ("append", 4), ("restart", 3))
LENGTHS = [0, 5, 11, 14, 18, 21]  # committed length at commit 0..5
SEAM_COMMITS = {3: 11, 5: 18}  # the commit that made a seam -> where it is
EPISODE_LEAVES: dict[str, Any] = {
    "done_leaf": "done",
    "truncated_leaf": "trunc",
    "reward_leaf": "reward",
}


# ------------------------------------------------------------------------------ the model
def model_block(g0: int, n: int, rows: int = ROWS) -> dict[str, np.ndarray]:
    """Timesteps ``g0 .. g0 + n - 1`` as written (leaves ``[rows, n, ...]``)."""
    g = np.arange(g0, g0 + n)[None, :] + np.zeros((rows, 1), np.int64)
    r = np.arange(rows)[:, None] + np.zeros((1, n), np.int64)
    pos = 1000 * r + g
    return {
        "obs": np.stack([pos, -pos], axis=-1).astype(np.float32),
        "reward": (((7 * g + 3 * r) % 11) - 5).astype(np.float32),
        "done": (g + r) % 5 == 4,
        "trunc": (g + 2 * r) % 7 == 6,
    }


def model(length: int) -> dict[str, np.ndarray]:
    """Every leaf of the vault's first ``length`` timesteps (the model of a pin)."""
    return {k: v[:, :length] for k, v in model_block(0, LENGTHS[-1]).items()}


def model_seams(commit: int) -> list[dict[str, int]]:
    return [{"at": at, "lost": 0} for c, at in SEAM_COMMITS.items() if c <= commit]


def model_episodes(commit: int) -> list[dict[str, Any]]:
    """Episodes at ``commit`` (open ones too)."""
    length = LENGTHS[commit]
    return episodes_of(model(length), [s["at"] for s in model_seams(commit)])


def episodes_of(data: dict[str, np.ndarray], seams: list[int]) -> list[dict[str, Any]]:
    """The episodes of ``data`` (open ones too), found by walking every step: none runs
    across a seam, and the unfinished one before a seam is dropped."""
    rows, length = data["done"].shape
    cuts = [0, *seams, length]
    out = []
    for r in range(rows):
        for a, b in itertools.pairwise(cuts):
            start, ret = a, 0.0
            for t in range(a, b):
                ret += float(data["reward"][r, t])
                done, trunc = bool(data["done"][r, t]), bool(data["trunc"][r, t])
                if done or trunc:
                    out.append(
                        {"row": r, "start": start, "length": t + 1 - start, "return": ret,
                         "truncated": trunc and not done, "complete": True}
                    )  # fmt: skip
                    start, ret = t + 1, 0.0
            if b == length and start < b:
                out.append(
                    {"row": r, "start": start, "length": b - start, "return": ret,
                     "truncated": False, "complete": False}
                )  # fmt: skip
    return out


def key(record: dict[str, Any]) -> tuple[int, int]:
    return record["row"], record["start"]


def stats_model(values: np.ndarray) -> dict[str, Any]:
    flat = np.asarray(values).reshape(-1)
    if flat.dtype == np.bool_:
        flat = flat.astype(np.uint8)
    wide = flat.astype(np.float64)
    empty = flat.size == 0
    return {
        "count": flat.size,
        "finite": flat.size,
        "nan": 0,
        "inf": 0,
        "min": None if empty else flat.min().item(),
        "max": None if empty else flat.max().item(),
        "mean": None if empty else float(wide.mean()),
        "std": None if empty else float(wide.std()),
    }


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, np.float64)
    return {"min": a.min(), "max": a.max(), "mean": a.mean(), "std": a.std()}


def close(got: Any, want: Any) -> bool:
    if want is None or got is None:
        return got is want
    return bool(got == pytest.approx(want, rel=1e-9, abs=1e-9))


# ------------------------------------------------------------------------------- fixtures
def _buffer_state(g0: int, n: int, ring: int = 8) -> Any:
    """A trajectory-buffer state new to the vault: ``n`` timesteps added (``data(g0..)``),
    the rest of its ring never written (zeros)."""
    held = {k: np.zeros((ROWS, ring, *v.shape[2:]), v.dtype) for k, v in model_block(0, 1).items()}
    for k, v in model_block(g0, n).items():
        held[k][:, :n] = v
    index: Any = np.int32(n)
    full: Any = np.bool_(False)
    return fbx.TrajectoryBufferState(held, current_index=index, is_full=full)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("json_vs_lib")
    path = root / "lib" / "v"  # alone in lib/, for `vault ls`
    example = {k: np.zeros(v.shape[2:], v.dtype) for k, v in model_block(0, 1).items()}
    chunk: dict[str, Any] = {k: [ROWS, CHUNK_T, *v.shape[2:]] for k, v in model_block(0, 1).items()}
    g = 0
    with Vault.create(str(path), example, rows=ROWS, chunk=chunk, **EPISODE_LEAVES) as vault:
        for how, n in WRITES:
            if how == "new_buffer":
                assert vault.write(_buffer_state(g, n), new_buffer=True) == n
            else:
                vault.append(model_block(g, n), continues=how != "restart")
            g += n
    cli = Cli()
    # tags set through the command (one by number, one by commit id), read back by the API
    ids = [Vault.open(str(path), at=k).commit_id for k in range(len(LENGTHS))]
    tagged = [
        cli.json("tag", path, "before", "--at", "2"),
        cli.json("tag", path, "mid", "--at", ids[3]),
    ]
    return {"path": path, "ids": ids, "tagged": tagged, "root": root}


def test_the_model_is_what_the_vault_holds(built: dict[str, Any]) -> None:
    """The fixture's premise: every commit of the vault is the model cut at its length."""
    for commit, length in enumerate(LENGTHS):
        pinned = Vault.open(str(built["path"]), at=commit)
        assert pinned.committed_length == length
        assert [s.to_json() for s in pinned.seams] == model_seams(commit)
        got = pinned.read_numpy(leaves=list(LEAVES))
        for name, want in model(length).items():
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} at {commit}")


def test_tag_json_names_the_commit_the_library_reads(built: dict[str, Any]) -> None:
    path, ids = built["path"], built["ids"]
    before, mid = built["tagged"]
    assert before == {"path": str(path), "tag": "before", "commit": ids[2], "committed": 11}
    assert mid == {"path": str(path), "tag": "mid", "commit": ids[3], "committed": 14}
    assert Vault.open(str(path)).tags() == {"before": ids[2], "mid": ids[3]}
    assert Vault.open(str(path), at="before").commit_id == ids[2]
    # the same tag at the same commit again: nothing moves, the same answer
    again = Cli().json("tag", path, "mid", "--at", "3")
    assert again == mid


# ------------------------------------------------------------- every command at every pin
PINS = [(c, "number") for c in range(len(LENGTHS))] + [
    (1, "id"), (3, "id"), (5, "id"), (2, "tag"), (3, "tag")
]  # fmt: skip


def at_text(built: dict[str, Any], commit: int, how: str) -> str:
    if how == "number":
        return str(commit)
    if how == "id":
        return str(built["ids"][commit])
    return {2: "before", 3: "mid"}[commit]


@pytest.mark.parametrize(("commit", "how"), PINS, ids=[f"{c}-{h}" for c, h in PINS])
def test_every_reader_at_a_pin_says_what_the_model_and_the_api_say(
    built: dict[str, Any], commit: int, how: str
) -> None:
    cli, path = Cli(), built["path"]
    at = at_text(built, commit, how)
    length = LENGTHS[commit]
    pinned = Vault.open(str(path), at=at if how != "number" else commit)
    want_eps = model_episodes(commit)
    complete = [e for e in want_eps if e["complete"]]
    n_open = len(want_eps) - len(complete)

    info = cli.json("info", path, "--at", at)
    assert info["commit"] == built["ids"][commit] == pinned.commit_id
    assert info["fingerprint"] == pinned.fingerprint()
    assert info["committed"] == length
    assert info["rows"] == ROWS
    assert info["seams"] == model_seams(commit)
    assert (info["episodes"], info["open_episodes"]) == (len(complete), n_open)
    assert info["tags"] == pinned.tags() == {"before": built["ids"][2], "mid": built["ids"][3]}
    step_bytes = {"done": 1, "trunc": 1, "reward": 4, "obs": 8}
    assert {leaf["name"]: (leaf["shape"], leaf["raw_bytes"]) for leaf in info["leaves"]} == {
        n: ([ROWS, length, *model_block(0, 1)[n].shape[2:]], ROWS * length * step_bytes[n])
        for n in LEAVES
    }
    assert info["raw_bytes"] == ROWS * length * sum(step_bytes.values())

    stats = cli.json("stats", path, "--at", at)
    assert (stats["rows"], stats["committed"]) == (ROWS, length)
    got_stats = {s["name"]: s for s in stats["leaves"]}
    api_stats = {s.name: s.to_dict() for s in leaf_stats(pinned)}
    for name, values in model(length).items():
        want = stats_model(values)
        for field, value in want.items():
            assert close(got_stats[name][field], value), (name, field, got_stats[name], want)
        assert got_stats[name] == json.loads(json.dumps(api_stats[name])), name
    assert (stats["episodes"], stats["open_episodes"]) == (len(complete), n_open)
    assert stats["truncated_episodes"] == sum(e["truncated"] for e in complete)
    for field, column in (
        ("episode_return", [e["return"] for e in complete]),
        ("episode_length", [e["length"] for e in complete]),
    ):
        want_spread = spread(column)
        if want_spread is None:
            assert stats[field] is None, field
        else:
            assert {k: close(stats[field][k], v) for k, v in want_spread.items()} == dict.fromkeys(
                want_spread, True
            ), (field, stats[field], want_spread)

    episodes = cli.json("episodes", path, "--at", at, "--open", "--head", "0")
    assert (episodes["episodes"], episodes["open_episodes"]) == (len(complete), n_open)
    got_records = sorted(episodes["records"], key=key)
    fields = ("row", "start", "length", "return", "truncated", "complete")
    assert [{f: r[f] for f in fields} for r in got_records] == sorted(want_eps, key=key)
    api_records = json.loads(json.dumps(pinned.episodes(include_open=True).to_records()))
    assert got_records == sorted(api_records, key=key)
    # a start is unknown only where a buffer new to the vault begins (where its rows were
    # in their episodes, nobody knows); after append(continues=False) it is known
    assert [key(r) for r in got_records if not r["start_known"]] == (
        [(0, 11), (1, 11)] if commit >= 3 else []
    )

    shown = cli.json("show", path, "--at", at)
    assert shown["time"] == [0, length]
    assert shown["rows_selected"] == list(range(ROWS))
    want_data = model(length)
    for leaf in shown["leaves"]:
        assert leaf["shape"] == list(want_data[leaf["name"]].shape)
        np.testing.assert_array_equal(
            np.asarray(leaf["values"], want_data[leaf["name"]].dtype).reshape(leaf["shape"]),
            want_data[leaf["name"]],
            err_msg=leaf["name"],
        )
    if length >= 3:  # negative --time counts from the pinned end, not the latest
        tail = cli.json("show", path, "--at", at, "--leaf", "obs", "--rows", "1", "--time", "-3:")
        assert tail["time"] == [length - 3, length]
        assert tail["leaves"][0]["values"] == want_data["obs"][1:, -3:].tolist()

    verified = cli.json("verify", path, "--at", at)
    assert verified["ok"] is True, verified
    assert verified["committed"] == length
    assert verified["episodes_checked"] == len(complete)
    # the chunks of the pinned range only (+ the episode index's bounds and returns, one
    # chunk each here), never those later appends wrote
    index_chunks = 2 if length else 0
    assert verified["chunks_checked"] == len(LEAVES) * -(-length // CHUNK_T) + index_chunks
    assert verified == {"path": str(path), **_verify_doc(path, at, commit, how)}
    # without --at, the fingerprint alone finds this commit (growth since is no problem)
    found = cli.json("verify", path, "--fingerprint", pinned.fingerprint())
    assert (found["ok"], found["committed"]) == (True, length)
    assert verified["problems"] == []


def _verify_doc(path: Path, at: str, commit: int, how: str) -> dict[str, Any]:
    report = verify(str(path), at=commit if how == "number" else at).to_dict()
    report.pop("location")
    return {"ok": report.pop("ok"), "committed": report.pop("committed_length"), **report}


# ------------------------------------------------------------ human output = the JSON
def table_rows(text: str) -> list[list[str]]:
    """The body rows of a rich table (box characters), each as its cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([c.strip() for c in line.strip().strip("│").split("│")])
    return rows


def fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("at", ["1", "3", "mid", "5"])
def test_the_human_output_says_the_numbers_of_the_json(built: dict[str, Any], at: str) -> None:
    cli, path = Cli(), built["path"]
    doc = cli.json("info", path, "--at", at)
    text = cli("info", path, "--at", at).stdout
    facts = {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^([a-z][a-z ]+?)  +(\S.*?)\s*$", text, re.MULTILINE)
    }
    assert facts["rows"] == str(doc["rows"])
    assert facts["committed timesteps"] == str(doc["committed"])
    assert facts["episodes"] == f"{doc['episodes']} complete, {doc['open_episodes']} open"
    assert facts["commit"] == doc["commit"]
    want_seams = ", ".join(f"restart at t={s['at']}" for s in doc["seams"])
    assert facts.get("seams", "") == want_seams
    assert facts["raw size"] == f"{doc['raw_bytes']} B"  # under 1 KiB here
    assert facts["compression"] == "-"  # a pinned commit's raw size over the whole disk
    assert doc["ratio"] is None
    for leaf in doc["leaves"]:
        shape = ", ".join(map(str, leaf["shape"]))
        assert f"{leaf['name']}  {leaf['dtype']} [{shape}]" in text, leaf

    stats = cli.json("stats", path, "--at", at)
    body = table_rows(cli("stats", path, "--at", at).stdout)
    by_leaf = {cells[0]: cells for cells in body if cells[0] in LEAVES}
    assert sorted(by_leaf) == sorted(LEAVES)
    for s in stats["leaves"]:
        cells = by_leaf[s["name"]]
        assert cells[1:] == [
            s["dtype"], str(s["count"]), fmt(s["min"]), fmt(s["max"]), fmt(s["mean"]),
            fmt(s["std"]), str(s["nan"]), str(s["inf"]),
        ], s  # fmt: skip
    stats_text = cli("stats", path, "--at", at).stdout
    assert (
        f"episodes: {stats['episodes']} complete ({stats['truncated_episodes']} truncated), "
        f"{stats['open_episodes']} open"
    ) in stats_text
    for name, field in (("return", "episode_return"), ("length", "episode_length")):
        (cells,) = [c for c in body if c[0] == name]
        assert cells[1:] == [fmt(stats[field][k]) for k in ("min", "max", "mean", "std")]

    eps = cli.json("episodes", path, "--at", at, "--open", "--head", "0")
    eps_text = cli("episodes", path, "--at", at, "--open", "--head", "0").stdout
    n_open = eps["open_episodes"]
    title = f"{eps['episodes']} complete episodes" + (f" and {n_open} open" if n_open else "")
    assert title in " ".join(eps_text.split())  # (a long path wraps the title: see below)
    shown = [c for c in table_rows(eps_text) if c[0].isdigit()]
    assert shown == [
        [
            str(r["row"]), str(r["start"]), str(r["length"]), fmt(r["return"], 6),
            "yes" if r["truncated"] else "no", "yes" if r["complete"] else "open",
            str(r["start"] + r["length"]), "yes" if r["start_known"] else "no (after a seam)",
        ]
        for r in eps["records"]
    ]  # fmt: skip

    shown = cli.json("show", path, "--at", at, "--leaf", "reward", "--rows", "1", "--time", "1:4")
    head = cli("show", path, "--at", at, "--leaf", "reward", "--rows", "1", "--time", "1:4")
    assert head.stdout.splitlines()[0] == (
        f"{path}: rows 1, time [{shown['time'][0]}, {shown['time'][1]}) of {doc['committed']} "
        "committed"
    )
    assert f"reward  float32 {shown['leaves'][0]['shape']}" in head.stdout

    verified = cli.json("verify", path, "--at", at)
    line = cli("verify", path, "--at", at).stdout.strip()
    assert line == (
        f"sound: {path}: {verified['committed']} timesteps; checked "
        f"{verified['chunks_checked']} chunks, {verified['episodes_checked']} episodes"
    )


# ------------------------------------------------ new vaults and files made from the vault
FIELDS = ("row", "start", "length", "return", "truncated", "complete")


def test_slice_combine_subsample_export_json_is_what_they_wrote(built: dict[str, Any]) -> None:
    """Each --json describes the vault (file) written, as the library reads it back, and the
    model says what it holds; each human line says the JSON's numbers."""
    cli, path, out = Cli(), built["path"], built["root"] / "derived"
    out.mkdir()
    everything = model(LENGTHS[-1])

    # a slice across the first seam (11 -> 8 in the slice), of row 1
    sliced = cli.json("slice", path, "--out", out / "s", "--time", "3:16", "--rows", "1")
    made = Vault.open(str(out / "s"))
    want = {k: v[1:, 3:16] for k, v in everything.items()}
    assert sliced == {
        "path": made.location, "kind": "vault", "rows": 1, "committed": 13,
        "episodes": len(made.episodes()),
        "open_episodes": len(made.episodes(include_open=True)) - len(made.episodes()),
        "source": str(path), "time": [3, 16], "rows_selected": [1],
    }  # fmt: skip
    got = made.read_numpy(leaves=list(LEAVES))
    for name in LEAVES:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert made.gaps == [{"at": 8, "lost": 0}]
    model_eps = episodes_of(want, [8])
    assert sliced["episodes"] == sum(e["complete"] for e in model_eps)
    records = sorted(made.episodes(include_open=True).to_records(), key=key)
    assert [{f: r[f] for f in FIELDS} for r in records] == sorted(model_eps, key=key)
    human = cli("slice", path, "--out", out / "s2", "--time", "3:16", "--rows", "1").stdout
    assert human.strip() == (
        f"wrote {out / 's2'}: 1 row x 13 timesteps, {sliced['episodes']} complete episodes"
    )

    # the slice twice, end to end: a seam at each join
    combined = cli.json("combine", out / "s", out / "s2", "--out", out / "c")
    joined = Vault.open(str(out / "c"))
    assert combined["sources"] == [str(out / "s"), str(out / "s2")]
    assert (combined["rows"], combined["committed"]) == (1, 26) == (joined.rows, 26)
    assert joined.gaps == [{"at": 8, "lost": 0}, {"at": 13, "lost": 0}, {"at": 21, "lost": 0}]
    twice = {k: np.concatenate([v, v], axis=1) for k, v in want.items()}
    twice_eps = episodes_of(twice, [8, 13, 21])
    assert combined["episodes"] == len(joined.episodes()) == sum(e["complete"] for e in twice_eps)
    assert combined["open_episodes"] == sum(not e["complete"] for e in twice_eps)

    # the best three complete episodes whose start is known, gathered into one row
    best = cli.json("subsample", path, "--out", out / "k", "--top-k", "3")
    picked = Vault.open(str(out / "k"))
    assert (best["episodes_selected"], best["episodes"], best["rows"]) == (3, 3, 1)
    table = Vault.open(str(path)).episodes()
    known = np.asarray(table.start_known, bool)
    top = sorted(np.asarray(table.returns)[known].tolist(), reverse=True)[:3]
    got_returns = [r["return"] for r in picked.episodes().to_records()]
    assert sorted(got_returns, reverse=True) == top
    assert (
        best["committed"]
        == picked.committed_length
        == sum(r["length"] for r in picked.episodes().to_records())
    )
    reward = picked.read_numpy(leaves=["reward"])["reward"][0]
    for r in picked.episodes().to_records():
        assert float(reward[r["start"] : r["start"] + r["length"]].sum()) == r["return"]

    # an export of [11, 19): the seam at its first timestep and the one inside it
    exported = cli.json("export", path, "--out", out / "e.npz", "--time", "11:19")
    assert exported == {
        "path": str(path), "out": str(out / "e.npz"), "format": "npz",
        "leaf_names": list(LEAVES), "bytes": (out / "e.npz").stat().st_size,
    }  # fmt: skip
    with np.load(out / "e.npz") as npz:
        for name in LEAVES:
            np.testing.assert_array_equal(npz[name], everything[name][:, 11:19], err_msg=name)
        header = json.loads(str(npz["__manifest__"]))
    assert header["seams"] == [{"at": 11, "lost": 0}, {"at": 18, "lost": 0}]
    assert (header["rows"], header["time"]) == ([0, 1], [11, 19])
    human = cli("export", path, "--out", out / "e2.npz", "--time", "11:19").stdout
    size = (out / "e2.npz").stat().st_size
    assert human.strip() == f"wrote {out / 'e2.npz'} (npz, 4 leaves, {size} bytes)"


def test_ls_json_and_its_table_say_what_the_library_says(built: dict[str, Any]) -> None:
    cli, folder = Cli(), built["path"].parent
    vault = Vault.open(str(built["path"]))
    (entry,) = cli.json("ls", folder)
    table = vault.episodes(include_open=True)
    assert entry["path"] == vault.location
    assert (entry["rows"], entry["committed"]) == (ROWS, LENGTHS[-1])
    assert entry["episodes"] == len(vault.episodes()) == int(np.asarray(table.complete).sum())
    assert entry["open_episodes"] == len(table) - entry["episodes"]
    assert entry["raw_bytes"] == ROWS * LENGTHS[-1] * vault.manifest.step_bytes
    assert entry["leaf_count"] == len(vault.leaf_names) == len(LEAVES)
    assert entry["format_version"] == vault.manifest.format_version
    text = cli("ls", folder).stdout
    (cells,) = [line.split() for line in text.splitlines() if line.strip().startswith("v ")]
    assert cells[:4] == ["v", str(ROWS), str(LENGTHS[-1]), str(entry["episodes"])]


# ------------------------------------------------------------------ a nested, escaped vault
class Pair(NamedTuple):
    a: Any
    b: Any


def nested_block(g0: int, n: int) -> dict[str, Any]:
    """Leaves that encode (leaf number k, row, g): ``100000 * k + 1000 * row + g``."""
    g = np.arange(g0, g0 + n)[None, :] + np.zeros((ROWS, 1), np.int64)
    pos = 1000 * np.arange(ROWS)[:, None] + g

    def leaf(k: int, dtype: Any) -> np.ndarray:
        return (100_000 * k + pos).astype(dtype)

    return {
        "a b": leaf(1, np.float64),
        "x.y": leaf(2, np.int32),
        "u/v": {"w": leaf(3, np.int64), "50%": leaf(4, np.float32)},
        "t": (
            leaf(5, np.int64),
            [leaf(6, np.float64), Pair(leaf(7, np.int32), leaf(8, np.uint32))],
        ),
        "done": g % 3 == 2,
    }


NESTED_NAMES = {  # leaf path (escaped) -> where the value sits in nested_block
    "a%20b": ("a b",),
    "done": ("done",),
    "t/0": ("t", 0),
    "t/1/0": ("t", 1, 0),
    "t/1/1/a": ("t", 1, 1, 0),
    "t/1/1/b": ("t", 1, 1, 1),
    "u%2Fv/50%25": ("u/v", "50%"),
    "u%2Fv/w": ("u/v", "w"),
    "x.y": ("x.y",),
}


def pick(tree: Any, where: tuple[Any, ...]) -> np.ndarray:
    for step in where:
        tree = tree[step]
    return np.asarray(tree)


def test_a_nested_vault_with_escaped_names_at_a_pin(built: dict[str, Any]) -> None:
    cli, path = Cli(), built["root"] / "nested"
    example = nested_block(0, 1)
    zero = __import__("jax").tree_util.tree_map(lambda v: np.zeros((), v.dtype), example)
    with Vault.create(str(path), zero, rows=ROWS, done_leaf="done") as vault:
        vault.append(nested_block(0, 4))
        vault.append(nested_block(4, 5))
        vault.append(nested_block(9, 3))
    pinned = Vault.open(str(path), at=2)
    assert sorted(pinned.leaf_names) == sorted(NESTED_NAMES)
    want = nested_block(0, 9)
    info = cli.json("info", path, "--at", "2")
    assert [leaf["name"] for leaf in info["leaves"]] == pinned.leaf_names
    assert {leaf["name"]: leaf["shape"] for leaf in info["leaves"]} == {
        name: [ROWS, 9] for name in NESTED_NAMES
    }
    text = cli("info", path, "--at", "2").stdout
    for label in ("a b  float64 [2, 9]", "u/v  (dict)", "50%  float32 [2, 9]", "x.y  int32",
                  "[1]  (list)", "[1]  (Pair)", "a  int32 [2, 9]", "b  uint32 [2, 9]"):  # fmt: skip
        assert label in text, (label, text)
    stats = {s["name"]: s for s in cli.json("stats", path, "--at", "2")["leaves"]}
    for name, where in NESTED_NAMES.items():
        values = pick(want, where)
        shown = cli.json("show", path, "--at", "2", "--leaf", name, "--rows", "1", "--time", "6:")
        assert shown["leaves"][0]["name"] == name
        assert shown["leaves"][0]["values"] == values[1:, 6:].tolist(), name
        for field, value in stats_model(values).items():
            assert close(stats[name][field], value), (name, field)
        one = cli.json("stats", path, "--at", "2", "--leaf", name)["leaves"]
        assert [s["name"] for s in one] == [name]
        assert one[0] == stats[name]
    assert cli.json("episodes", path, "--at", "2")["episodes"] == 2 * 3 == len(pinned.episodes())
    # an unescaped path is not a leaf name: one line listing the names that are
    line = one_error_line(cli("show", path, "--at", "2", "--leaf", "u/v/w", code=1))
    assert "u%2Fv/w" in line


# --------------------------------------------------------------- a dataset read at a tag
@pytest.fixture(scope="module")
def tagged_ds(built: dict[str, Any]) -> dict[str, Any]:
    """Shards ``a`` (2 rows, 6 steps) and ``b`` (1 row, 9 steps) tagged ``t1`` through the
    command; then ``a`` grows by 5 and ``c`` joins."""
    cli, root = Cli(), built["root"] / "ds"
    example = {k: np.zeros(v.shape[2:], v.dtype) for k, v in model_block(0, 1).items()}

    def shard(name: str, rows: int, g0: int, n: int) -> None:
        ds = Dataset.create(str(root), example, rows=ROWS, exist_ok=True, **EPISODE_LEAVES)
        with ds.shard(name, rows=rows) as writer:
            writer.append(model_block(g0, n, rows))

    shard("a", 2, 0, 6)
    shard("b", 1, 0, 9)
    tagged = cli.json("tag", root, "t1")
    shard("a", 2, 6, 5)  # grows after the tag
    shard("c", 2, 0, 4)  # joins after the tag
    return {"root": root, "tagged": tagged}


def test_a_dataset_at_a_tag_after_growth_and_a_new_shard(tagged_ds: dict[str, Any]) -> None:
    cli, root, tagged = Cli(), tagged_ds["root"], tagged_ds["tagged"]
    api = Dataset.open(str(root), at="t1")
    lengths = {"a": 6, "b": 9}
    assert [(s["shard"], s["committed"]) for s in tagged["shards"]] == list(lengths.items())
    info = cli.json("info", root, "--at", "t1")
    assert info["shards"] == api.describe()["shards"] == tagged["shards"]
    assert info["timesteps"] == api.timesteps == 2 * 6 + 1 * 9
    per_shard = {
        name: {k: v[:, :n] for k, v in model_block(0, n, 2 if name == "a" else 1).items()}
        for name, n in lengths.items()
    }
    stats = cli.json("stats", root, "--at", "t1")
    for s in stats["leaves"]:
        values = np.concatenate([per_shard[n][s["name"]].reshape(-1) for n in lengths])
        for field, value in stats_model(values).items():
            assert close(s[field], value), (s["name"], field)
    table = api.episodes(include_open=True)
    assert stats["episodes"] == int(np.asarray(table.complete).sum())
    eps = cli.json("episodes", root, "--at", "t1", "--open", "--head", "0")
    assert eps["records"] == json.loads(json.dumps(table.to_records()))
    assert {r["shard"] for r in eps["records"]} == {"a", "b"}
    for r in eps["records"]:
        reward = per_shard[r["shard"]]["reward"][r["row"], r["start"] : r["start"] + r["length"]]
        assert r["return"] == float(reward.sum()), r
    shown = cli.json("show", root, "--at", "t1", "--leaf", "obs")
    assert [s["shard"] for s in shown["shards"]] == ["a", "b"]
    for s in shown["shards"]:
        assert s["leaves"][0]["values"] == per_shard[s["shard"]]["obs"].tolist()
    one = cli.json("show", root, "--at", "t1", "--shard", "a", "--leaf", "reward")
    assert one["time"] == [0, 6]
    assert one["leaves"][0]["values"] == per_shard["a"]["reward"].tolist()
    assert stats["shards"] == tagged["shards"]
    assert stats["timesteps"] == info["timesteps"]
    assert (eps["episodes"], eps["open_episodes"]) == (
        stats["episodes"],
        stats["open_episodes"],
    )
    verified = cli.json("verify", root, "--at", "t1")
    assert verified["ok"] is True
    assert verified["timesteps"] == info["timesteps"]
    assert [(s["shard"], s["committed"]) for s in verified["shards"]] == list(lengths.items())
    # a tag of the tagged view names the same commits
    again = cli.json("tag", root, "t2", "--at", "t1")
    assert again["shards"] == tagged["shards"]
    assert Dataset.open(str(root), at="t2").describe()["shards"] == tagged["shards"]
    # the human lines say the JSON's numbers
    text = cli("info", root, "--at", "t1").stdout
    said = f"dataset at tag t1 of 2 shards, {info['timesteps']} timesteps"
    assert said in " ".join(text.split()), text
    for s in info["shards"]:
        assert [s["shard"], str(s["rows"]), str(s["committed"]), s["commit"]] in table_rows(text)


def test_a_shard_missing_from_the_tag_is_named_as_such(tagged_ds: dict[str, Any]) -> None:
    root = tagged_ds["root"]
    assert "c" in Dataset.open(str(root)).shards  # the dataset has it; the tag t1 does not
    line = one_error_line(Cli()("show", root, "--at", "t1", "--shard", "c", code=2))
    assert "t1" in line, line


# ------------------------------------------------------------------------ wrong --at values
@pytest.mark.parametrize(
    ("at", "code"),
    [
        ("-1", 1),  # not a number >= 0, not a tag name
        ("", 1),
        ("2 ", 1),
        ("1e3", 1),
        ("2-ABCDEF123456", 1),  # ids are lower-case hex
        ("zarr.json", 1),
        ("../x", 1),
        ("6", 2),  # one past the latest commit
        ("99999999999999999999999", 2),
        ("nope", 2),  # a valid tag name nobody set
    ],
)
@pytest.mark.parametrize("command", ["info", "show", "stats", "episodes", "verify", "tag"])
def test_a_wrong_at_is_one_line_with_its_code(
    built: dict[str, Any], command: str, at: str, code: int
) -> None:
    path = built["path"]
    args = [command, path, *(["newtag"] if command == "tag" else []), "--at", at, "--json"]
    result = Cli()(*args, code=code)
    line = one_error_line(result)
    assert result.stdout == ""
    assert str(path) in line
    assert "unexpected" not in line, line
    assert "a bug in rlvault" not in line, line
    if command == "tag":
        assert "newtag" not in Vault.open(str(path)).tags()


def test_a_commit_id_whose_uid_is_another_commits_is_refused_as_not_found(
    built: dict[str, Any],
) -> None:
    path, ids = built["path"], built["ids"]
    uid_of_2 = ids[2].split("-")[1]
    line = one_error_line(Cli()("info", path, "--at", f"3-{uid_of_2}", code=2))
    assert ids[3] in line  # names the commit that is there


def test_a_shortened_commit_id_is_refused_naming_the_whole_one(built: dict[str, Any]) -> None:
    path, ids = built["path"], built["ids"]
    short = ids[2][: ids[2].index("-") + 7]  # the commit number and 6 digits of its uid
    line = one_error_line(Cli()("info", path, "--at", short, code=2))
    assert "shortened" in line, line
    assert ids[2] in line, line
    assert "was rewritten or replaced" not in line, line


@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_superscript_digit_at_is_a_usage_error_not_a_bug(
    built: dict[str, Any], command: str
) -> None:
    path = built["path"]
    # the library refuses it as neither a commit id nor a tag name (VaultArgumentError)
    with pytest.raises(Exception, match="neither a commit id"):
        Vault.open(str(path), at="²")
    line = one_error_line(Cli()(command, path, "--at", "²", code=1))
    assert "unexpected" not in line, line
    assert "a bug in rlvault" not in line, line
    assert "²" in line


# ------------------------------------------------------ a path in a title is one piece
@pytest.mark.parametrize("command", ["stats", "episodes", "info DATASET"])
def test_a_long_path_in_a_table_title_stays_whole_on_a_wide_terminal(
    built: dict[str, Any], command: str
) -> None:
    """``vault ls`` keeps every path whole (a path cut across lines cannot be pasted back);
    the titles naming the vault must too, on a 200-column terminal where the line fits."""
    tail = "/sweep lr=0.001 seed=7/ds"
    pad = max(1, 120 - len(str(built["root"])) - len(tail))
    deep = built["root"] / ("r" * pad) / "sweep lr=0.001 seed=7"
    deep.mkdir(parents=True, exist_ok=True)
    if command == "info DATASET":
        path = deep / "ds"
        if not path.exists():
            dataset = Dataset.create(str(path), {"x": np.float32(0)}, rows=1)
            with dataset.shard("a") as writer:
                writer.append({"x": np.ones((1, 2), np.float32)})
        args: list[Any] = ["info", path]
    else:
        path = deep / "v"
        if not path.exists():
            shutil.copytree(built["path"], path)
        args = [command, path, "--at", "2"]
    assert 90 < len(str(path)) < 160  # wider than each table, narrower than the terminal
    text = Cli()(*args).stdout
    assert any(str(path) in line for line in text.splitlines()), text


# ----------------------------------------------------------- non-finite values in show --json
def test_show_json_tells_nan_and_each_infinity_apart(built: dict[str, Any]) -> None:
    path = built["root"] / "nonfinite"
    values = np.array([[1.5, np.nan, np.inf, -np.inf]], np.float32)
    with Vault.create(str(path), {"logp": np.float32(0)}, rows=1) as vault:
        vault.append({"logp": values})
    np.testing.assert_array_equal(Vault.open(str(path)).read_numpy()["logp"], values)
    text = Cli()("show", path).stdout
    assert "nan" in text  # the text says which is which
    assert "-inf" in text
    shown = Cli().json("show", path)["leaves"][0]["values"][0]
    assert shown[0] == 1.5
    assert shown[1:] == ["NaN", "Infinity", "-Infinity"], shown


def test_info_at_an_older_commit_gives_no_compression_ratio(built: dict[str, Any]) -> None:
    """The disk holds every commit's data, so the pinned commit's raw size over it is no
    compression ratio: none is given, and the text says whose disk size it shows."""
    path = built["path"]
    now = Cli().json("info", path)
    old = Cli().json("info", path, "--at", "2")
    assert now["ratio"] > 0
    assert old["ratio"] is None
    assert old["disk_bytes"] == now["disk_bytes"]
    assert old["raw_bytes"] < now["raw_bytes"]
    text = Cli()("info", path, "--at", "2").stdout
    assert "(the whole vault now)" in text
    assert "(the whole vault now)" not in Cli()("info", path).stdout
