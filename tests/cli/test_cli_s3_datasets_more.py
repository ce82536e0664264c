"""The ``vault`` command on the real S3 test server: vaults, datasets of shards, a shard's own
path, a prefix that holds several vaults, a prefix that holds nothing, a bucket that does not
exist, refused credentials and an endpoint where nothing listens; spellings of one location (a
trailing slash, ``S3://``, a key holding ``?`` and ``#``); ``--json`` on S3 against the same
command on an identical local vault or dataset (only the location may differ); ``--at`` pins
and tags while another process appends; ``verify`` of chunks damaged or deleted directly on
the server (through TensorStore's s3 kvstore); ``unlock`` of a writer that was SIGKILLed;
and the one-line messages with the exit codes of docs/cli.md (0 ok, 1 other, 2 not found /
not readable, 3 corrupt), each naming the location and what to do.

One S3 prefix per module holds a vault and a dataset (and a local twin of each, written with
the same values); tests that damage or lock something make their own small vault.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
from _cli_vaults import Cli, build, one_error_line

from vault import Dataset, Vault, VaultLockedError, parse_location

CHILD = Path(__file__).resolve().parents[1] / "vault" / "_s3_child.py"
CHILD_ROWS, CHILD_STEPS = 2, 3  # _s3_child.py's blocks: obs of block k is k + 1000 * row
CHILD_EXAMPLE = {"obs": np.zeros(4, np.float32), "done": np.zeros((), bool)}

DS_EXAMPLE = {"obs": np.zeros(2, np.float32), "done": np.bool_(False), "reward": np.float32(0)}
DS_LENGTHS = {"a": 5, "b": 7}
READERS = ("info", "stats", "episodes", "verify", "show", "ls")


# ------------------------------------------------------------------------------ helpers
def child_block(k: int) -> dict[str, np.ndarray]:
    """Block ``k`` as ``_s3_child.py`` writes it (so a vault started here can go on there)."""
    rows = 1000 * np.arange(CHILD_ROWS, dtype=np.float32)[:, None, None]
    obs = np.full((CHILD_ROWS, CHILD_STEPS, 4), k, np.float32) + rows
    done = np.zeros((CHILD_ROWS, CHILD_STEPS), bool)
    done[:, -1] = k % 2 == 1
    return {"obs": obs, "done": done}


def child_obs(timesteps: int) -> np.ndarray:
    """The obs of the first ``timesteps`` (whole blocks) a child writer leaves."""
    assert timesteps % CHILD_STEPS == 0, timesteps
    blocks = [child_block(k)["obs"] for k in range(timesteps // CHILD_STEPS)]
    return np.concatenate(blocks, axis=1)


def ds_block(shard: int, n: int) -> dict[str, np.ndarray]:
    """Values that say where they are: obs = (1000 * shard + row, t)."""
    t = np.broadcast_to(np.arange(n), (2, n))
    row = np.broadcast_to(np.arange(2)[:, None], (2, n))
    return {
        "obs": np.stack([1000 * shard + row, t], axis=-1).astype(np.float32),
        "done": t % 3 == 2,
        "reward": (t + shard).astype(np.float32),
    }


def make_dataset(root: str, lengths: dict[str, int] = DS_LENGTHS) -> None:
    Dataset.create(root, DS_EXAMPLE, rows=2, done_leaf="done", reward_leaf="reward")
    dataset = Dataset.open(root)
    for index, (name, n) in enumerate(lengths.items()):
        with dataset.shard(name) as shard:
            shard.append(ds_block(index, n))


def kvstore(location: str) -> Any:
    """The objects under ``location`` (an s3:// URL or a folder), to damage them directly."""
    return ts.KvStore.open(parse_location(location).spec).result()


def flip_a_byte(location: str, key: str) -> None:
    kv = kvstore(location)
    raw = bytearray(kv.read(key).result().value)
    raw[-6] ^= 0x10
    kv.write(key, bytes(raw)).result()


def delete_object(location: str, key: str) -> None:
    kvstore(location).delete_range(ts.KvStore.KeyRange(key, key + "\0")).result()


def same_but_where(doc: Any, location: str) -> Any:
    """``doc`` with ``location`` written ``LOC`` and what only storage decides left out: the
    sizes on disk (S3 lists none), the creation time, and the random part of a commit id
    (its number stays)."""
    text = json.dumps(doc).replace(location, "LOC")
    text = re.sub(r'"(\d+)-[0-9a-f]{12}"', r'"\1-ID"', text)
    out = json.loads(text)

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            drop = ("disk_bytes", "ratio", "created")
            return {k: strip(v) for k, v in node.items() if k not in drop}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(out)


@dataclasses.dataclass(frozen=True)
class World:
    """One S3 prefix for the module: ``runs/v`` (a vault), ``runs/ds`` (a dataset of shards
    ``a`` and ``b``), and their local twins ``local/v`` and ``local/ds`` (the same values)."""

    prefix: str
    vault: str
    dataset: str
    local_vault: str
    local_dataset: str
    data: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def world(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    prefix = f"s3://{s3_server.bucket}/cli-s3-more-{uuid.uuid4().hex[:10]}"
    local = tmp_path_factory.mktemp("cli-s3-more")
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(key)
        for key, value in s3_server.environment().items():
            mp.setenv(key, value)
        data = build(f"{prefix}/runs/v", writes=(6, 7))
        assert build(local / "v", writes=(6, 7))["obs"].tobytes() == data["obs"].tobytes()
        make_dataset(f"{prefix}/runs/ds")
        make_dataset(str(local / "ds"))
        yield World(
            prefix=prefix,
            vault=f"{prefix}/runs/v",
            dataset=f"{prefix}/runs/ds",
            local_vault=str(local / "v"),
            local_dataset=str(local / "ds"),
            data=data,
        )


def start_writer(location: str, start: int, n: int) -> subprocess.Popen[str]:
    """``_s3_child.py writer``: appends blocks ``start..start+n-1``, then sleeps."""
    return subprocess.Popen(
        [sys.executable, str(CHILD), "writer", location, str(start), str(n)],
        stdout=subprocess.PIPE,
        text=True,
    )


def kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()


# ---------------------------------------------------------- S3 against an identical local copy
@pytest.mark.parametrize("kind", ["vault", "dataset"])
def test_every_readers_json_on_s3_is_the_local_ones(
    cli: Cli, world: World, s3_env: Any, kind: str
) -> None:
    """Only the location (and what storage alone decides: sizes on disk, creation time, the
    random part of a commit id) may differ between S3 and disk; the fingerprint may not."""
    s3, disk = (
        (world.vault, world.local_vault)
        if kind == "vault"
        else (world.dataset, world.local_dataset)
    )
    extra = {"show": ["--leaf", "obs", "--time", "2:5"], "episodes": ["--head", "0"]}
    for command in READERS:
        on_s3 = cli.json(command, s3, *extra.get(command, []))
        on_disk = cli.json(command, disk, *extra.get(command, []))
        assert same_but_where(on_s3, s3) == same_but_where(on_disk, disk), command
    if kind == "vault":
        assert cli.json("info", s3)["fingerprint"] == cli.json("info", disk)["fingerprint"]
        shown = cli.json("show", s3, "--leaf", "obs", "--rows", "2,0", "--time", "3:9")
        np.testing.assert_array_equal(shown["leaves"][0]["values"], world.data["obs"][[2, 0], 3:9])
    else:
        shown = cli.json("show", s3, "--shard", "b", "--leaf", "obs")
        np.testing.assert_array_equal(shown["leaves"][0]["values"], ds_block(1, 7)["obs"])


def test_a_shards_own_path_on_s3_is_that_shard(cli: Cli, world: World, s3_env: Any) -> None:
    shard = f"{world.dataset}/shards/b"
    doc = cli.json("info", shard)
    assert (doc["path"], doc["kind"], doc["committed"]) == (shard, "vault", 7)
    assert cli.json("verify", shard)["ok"] is True
    shown = cli.json("show", shard, "--leaf", "obs")
    np.testing.assert_array_equal(shown["leaves"][0]["values"], ds_block(1, 7)["obs"])
    via_root = cli.json("show", world.dataset, "--shard", "b", "--leaf", "obs")
    assert via_root["leaves"] == shown["leaves"]


def test_a_prefix_holding_vaults_is_listed_and_one_holding_nothing_is_empty(
    cli: Cli, world: World, s3_env: Any
) -> None:
    entries = cli.json("ls", f"{world.prefix}/runs")
    assert [(e["path"], e["kind"]) for e in entries] == [
        (world.dataset, "dataset"),
        (world.vault, "vault"),
    ]
    assert [e["committed"] for e in cli.json("ls", world.dataset)] == list(DS_LENGTHS.values())
    # a prefix that only starts like a vault's is not that vault: keys are not paths
    assert cli.json("ls", f"{world.prefix}/run") == []
    assert cli.json("ls", f"{world.prefix}/runs/v-and-more") == []


# --------------------------------------------------------------- spellings of one location
@pytest.mark.parametrize("spelling", ["{loc}/", "{loc}//", "S3://{rest}"])
def test_other_spellings_name_the_same_vault(
    cli: Cli, world: World, s3_env: Any, spelling: str
) -> None:
    typed = spelling.format(loc=world.vault, rest=world.vault.removeprefix("s3://"))
    for command in READERS:
        doc = cli.json(command, typed)
        doc = doc[0] if isinstance(doc, list) else doc
        assert doc["path"] == world.vault, (command, typed)
    tagged = cli.json("tag", typed, f"spelt-{len(typed)}")
    assert tagged["path"] == world.vault
    assert tagged["committed"] == 13


def test_unlock_json_names_the_vault_as_every_command_does(
    cli: Cli, world: World, s3_env: Any
) -> None:
    for typed in (f"{world.vault}/", "S3://" + world.vault.removeprefix("s3://")):
        doc = cli.json("unlock", typed, "--yes")
        assert doc["broken"] is False  # nobody writes the module's vault
        assert doc["path"] == cli.json("info", typed)["path"] == world.vault, typed


def test_a_key_holding_a_query_and_a_fragment_is_a_key(
    cli: Cli, world: World, s3_env: Any, tmp_path: Path
) -> None:
    """``?`` and ``#`` are part of an S3 key: a vault written there is listed under that
    key, and the listed path, pasted back, opens it."""
    where = f"{world.prefix}/odd/run?seed=1#2"
    made = cli.json("slice", world.local_vault, "--out", where, "--time", "0:4")
    assert made["path"] == where
    listed = cli.json("ls", f"{world.prefix}/odd")
    assert [e["path"] for e in listed] == [where]
    assert cli.json("info", listed[0]["path"])["committed"] == 4
    # the same URL without its query is another key: nothing there
    line = one_error_line(cli("info", f"{world.prefix}/odd/run", code=2))
    assert f"{world.prefix}/odd/run" in line


# ------------------------------------------------------------ places that hold no vault
@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_prefix_of_vaults_given_as_a_vault_points_to_ls(
    cli: Cli, world: World, s3_env: Any, command: str
) -> None:
    runs = f"{world.prefix}/runs"
    line = one_error_line(cli(command, runs, code=2))
    assert runs in line
    assert "vault ls" in line


@pytest.mark.parametrize(
    "args", [["info"], ["verify"], ["unlock", "--yes"], ["slice", "--out", "{d}"]]
)
def test_a_missing_bucket_is_named_as_missing(
    cli: Cli, s3_env: Any, tmp_path: Path, args: list[str]
) -> None:
    where = "s3://no-such-bucket-rlvault/runs/v"
    command, *rest = args
    result = cli(command, where, *(a.format(d=tmp_path / "d") for a in rest), code=2)
    line = one_error_line(result)
    assert where in line
    assert "bucket 'no-such-bucket-rlvault' does not exist" in line
    assert not (tmp_path / "d").exists()


def test_ls_of_a_missing_bucket_names_it(cli: Cli, s3_env: Any) -> None:
    line = one_error_line(cli("ls", "s3://no-such-bucket-rlvault/runs", code=2))
    assert "the bucket 'no-such-bucket-rlvault' does not exist" in line
    assert "create it first or check the bucket name" in line


# -------------------------------------------------------------- credentials and endpoints
def test_refused_credentials_are_one_line_exit_2_for_every_reader(
    cli: Cli, world: World, s3_env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    for args in (
        ["info", world.vault],
        ["ls", f"{world.prefix}/runs"],
        ["verify", world.dataset],
        ["tag", world.vault, "never"],
        ["unlock", f"{world.dataset}/shards/a", "--yes"],
        ["export", world.vault, "--out", str(tmp_path / "o.npz")],
    ):
        line = one_error_line(cli(*args, code=2))
        assert args[1] in line, args
        assert "credentials were refused" in line, args
        assert "AWS_SECRET_ACCESS_KEY" in line, args
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_env.environment()["AWS_SECRET_ACCESS_KEY"])
    assert "never" not in cli.json("info", world.vault)["tags"]


@pytest.mark.parametrize("command", ["slice", "subsample", "combine"])
def test_refused_credentials_writing_to_s3_say_to_check_the_keys(
    cli: Cli, world: World, s3_env: Any, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    out = f"{world.prefix}/never-{command}"
    sources = [world.local_vault] * (2 if command == "combine" else 1)
    line = one_error_line(cli(command, *sources, "--out", out, code=2))
    assert out in line
    assert "credentials were refused" in line
    assert "AWS_SECRET_ACCESS_KEY" in line


@pytest.mark.parametrize(
    "args",
    [
        ["tag", "@", "t"],
        ["unlock", "@", "--yes"],
        ["plot", "@", "--out", "{tmp}/p.png"],
        ["subsample", "@", "--out", "{tmp}/s"],
        ["info", "@/ds"],
        ["slice", "{local}", "--out", "@"],
    ],
)
def test_an_endpoint_where_nothing_listens_is_one_line_exit_1(
    cli: Cli,
    world: World,
    s3_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
) -> None:
    """The commands test_cli_inspect.py leaves out: within seconds, naming the location
    and the endpoint, nothing written."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    where = "s3://rlvault-closed/x"
    filled = [a.replace("@", where).format(tmp=tmp_path, local=world.local_vault) for a in args]
    line = one_error_line(cli(*filled, code=1))
    assert where in line
    assert "cannot reach the S3 endpoint http://127.0.0.1:9" in line
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------- pins while a writer appends
def test_pins_and_tags_hold_while_another_process_appends(
    cli: Cli, world: World, s3_env: Any
) -> None:
    loc = f"{world.prefix}/live/v"
    with Vault.create(loc, CHILD_EXAMPLE, rows=CHILD_ROWS, done_leaf="done") as first:
        first.append(child_block(0))
    episodes_at_1 = cli.json("episodes", loc, "--head", "0")
    writer = start_writer(loc, 1, 60)
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().startswith("committed 1")
        tags: dict[str, int] = {}
        for i in range(5):
            tagged = cli.json("tag", loc, f"t{i}")
            tags[f"t{i}"] = tagged["committed"]
            assert tagged["commit"].startswith(f"{tagged['committed'] // CHILD_STEPS}-")
            shown = cli.json("show", loc, "--at", f"t{i}", "--leaf", "obs")
            np.testing.assert_array_equal(
                shown["leaves"][0]["values"], child_obs(tagged["committed"])
            )
            checked = cli.json("verify", loc, "--at", f"t{i}")
            assert (checked["ok"], checked["committed"]) == (True, tagged["committed"])
            pinned = cli.json("info", loc, "--at", "1")
            assert (pinned["committed"], pinned["commit"][:2]) == (3, "1-")
            assert cli.json("episodes", loc, "--at", "1", "--head", "0") == episodes_at_1
        assert sorted(tags.values()) == list(tags.values())  # tags follow the commits
        line = "committed 1"
        while line and not line.startswith("committed 60"):
            line = writer.stdout.readline()  # "" if the writer died: then stop and fail
        assert line.startswith("committed 60"), line
        assert cli.json("info", loc)["committed"] == 61 * CHILD_STEPS
        for name, committed in tags.items():  # a tag never moves
            assert cli.json("info", loc, "--at", name)["committed"] == committed
    finally:
        kill(writer)


# ------------------------------------------------------------ unlock of a SIGKILLed writer
def test_unlock_frees_the_lease_of_a_sigkilled_writer(cli: Cli, world: World, s3_env: Any) -> None:
    loc = f"{world.prefix}/killed/v"
    with Vault.create(loc, CHILD_EXAMPLE, rows=CHILD_ROWS, done_leaf="done") as first:
        first.append(child_block(0))
    writer = start_writer(loc, 1, 2)
    try:
        assert writer.stdout is not None
        assert [writer.stdout.readline() for _ in range(2)][-1].startswith("committed 2")
    finally:
        kill(writer)
    info = cli.json("info", loc)
    assert info["writer"]["held"] is True
    assert info["writer"]["holder"]["pid"] == writer.pid
    with pytest.raises(VaultLockedError, match=re.escape(f"vault unlock {loc}")):
        Vault.open(loc, "a")
    # without --yes and without a terminal, nothing is broken
    line = one_error_line(cli("unlock", loc, code=1))
    assert loc in line
    assert "--yes" in line
    assert cli.json("info", loc)["writer"]["held"] is True
    doc = cli.json("unlock", loc, "--yes")
    assert doc["broken"] is True
    assert doc["holder"]["pid"] == writer.pid
    assert cli.json("info", loc)["writer"] == {"held": False, "holder": None}
    with Vault.open(loc, "a") as again:  # at once, not after the 30 s lease
        again.append(child_block(3))
    checked = cli.json("verify", loc)
    assert (checked["ok"], checked["committed"]) == (True, 4 * CHILD_STEPS)
    shown = cli.json("show", loc, "--leaf", "obs")
    np.testing.assert_array_equal(shown["leaves"][0]["values"], child_obs(4 * CHILD_STEPS))
    assert cli.json("unlock", loc, "--yes") == {"path": loc, "holder": None, "broken": False}


def test_unlock_of_an_s3_dataset_names_the_shard(cli: Cli, world: World, s3_env: Any) -> None:
    line = one_error_line(cli("unlock", world.dataset, "--yes", code=1))
    assert f"`vault unlock {world.dataset}/shards/NAME`" in line
    assert f"`vault ls {world.dataset}`" in line


# ------------------------------------------------------------- damaged on the server
@pytest.fixture
def twins(world: World, s3_env: Any, tmp_path: Path) -> tuple[str, str]:
    """A fresh small vault on S3 and its local twin (the same values), to damage."""
    s3 = f"{world.prefix}/damaged-{uuid.uuid4().hex[:8]}/v"
    build(s3, writes=(6, 7))
    build(tmp_path / "v", writes=(6, 7))
    return s3, str(tmp_path / "v")


def test_a_chunk_deleted_on_the_server_fails_verify_as_on_disk(
    cli: Cli, twins: tuple[str, str]
) -> None:
    for where in twins:
        delete_object(where, "experience/obs/c/1/0/0")
    s3, disk = (cli.json("verify", where, code=3) for where in twins)
    assert same_but_where(s3, twins[0]) == same_but_where(disk, twins[1])
    assert s3["ok"] is False
    assert [p["place"] for p in s3["problems"]] == ["experience/obs chunk 1.0.0"]
    assert "is missing" in s3["problems"][0]["message"]
    for command in ("stats", "show", "export"):
        extra = ["--out", f"{twins[1]}-{command}.npz"] if command == "export" else []
        line = one_error_line(cli(command, twins[0], *extra, code=3))
        assert f"{twins[0]}: array experience/obs" in line, command
        assert "restore the vault from a copy" in line
    assert not Path(f"{twins[1]}-export.npz").exists()
    assert "committed timesteps  13" in cli("info", twins[0]).stdout  # the manifest reads


def test_a_chunk_damaged_on_the_server_fails_verify_as_on_disk(
    cli: Cli, twins: tuple[str, str]
) -> None:
    for where in twins:
        flip_a_byte(where, "experience/reward/c/0/1")
    s3, disk = (cli.json("verify", where, code=3) for where in twins)
    assert [p["place"] for p in s3["problems"]] == ["experience/reward chunk 0.1"]
    assert same_but_where(s3, twins[0]) == same_but_where(disk, twins[1])


def test_a_missing_commit_record_on_the_server_is_corrupt_exit_3(
    cli: Cli, twins: tuple[str, str]
) -> None:
    s3 = twins[0]
    delete_object(s3, "commit/zarr.json")
    for command in ("info", "stats", "tag"):
        extra = ["t"] if command == "tag" else []
        line = one_error_line(cli(command, s3, *extra, code=3))
        assert f"{s3}: missing commit/zarr.json (the commit record)" in line, command
    report = cli.json("verify", s3, code=3)
    assert [p["place"] for p in report["problems"]] == ["commit/zarr.json (commit record)"]
    listed = cli.json("ls", s3.rsplit("/", 1)[0])
    assert [e["path"] for e in listed] == [s3]
    assert listed[0]["error"].startswith("VaultCorruptError: ")


# ------------------------------------------------------------ a destination in a dataset
def test_a_derived_vault_is_not_written_into_a_datasets_shards(
    cli: Cli, world: World, s3_env: Any
) -> None:
    root = f"{world.prefix}/intruded-{uuid.uuid4().hex[:8]}/ds"
    make_dataset(root, {"a": 4})
    result = cli("slice", world.vault, "--out", f"{root}/shards/zz", "--time", "0:3", code=None)
    after = cli("info", root, "--json", code=None)
    assert after.exit_code == 0, (result.exit_code, result.stderr, after.stderr)
    assert [s["shard"] for s in json.loads(after.stdout)["shards"]] == ["a"]
