"""More places where S3 locations meet the other features (``test_joints_s3.py`` has the
first set): keys with odd characters (spaces, ``%``, ``+``, unicode, brackets) through create,
read, listing, tags, derive and ``vault ls``; the ``vault`` command's ``--json`` on a dataset
of shards on a bucket (with its catalog, a shard grown and a shard added after it, a tag)
against the same dataset on disk; tags made by another process while the writer appends, and
a writer SIGKILLed and resumed; a shard whose create was killed; and the typed errors of
locations that cannot work: a missing bucket for a dataset, an invalid bucket name, ``.`` /
``..`` key segments, a destination inside its source named with other credentials, and an
endpoint that accepts connections but never answers.

Every test runs against the real S3 server of ``tests/conftest.py`` (SeaweedFS on loopback);
where it is cheap the same steps run on a local disk (``vault_url``) and must give the same
result. The data say where they belong (``obs = 1000 * row + t + item / 8``), so the model of
a commit of ``n`` timesteps is ``data(0, n)``. Child processes run this file as a script.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Dataset, Vault, VaultLocationError, VaultNotFoundError, parse_location

ROWS = 2
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
# uneven chunks: most appends rewrite a partly filled last chunk
CHUNK: dict[str, Sequence[int]] = {"obs": [2, 4, 2], "done": [2, 4], "reward": [2, 3]}
EPISODES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "reward"}
HERE = str(Path(__file__).resolve())


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: each value says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    return {
        "obs": ((1000 * r + t)[..., None] + np.arange(3) / 8).astype(np.float32),
        "done": (t + r) % 4 == 3,
        "reward": (0.5 * t - r).astype(np.float32),
    }


def equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str = "") -> None:
    assert sorted(got) == sorted(want), where
    for name, value in want.items():
        assert got[name].dtype == value.dtype, (where, name)
        np.testing.assert_array_equal(got[name], value, err_msg=f"{where} {name}")


def make(loc: Any, sizes: list[int], t0: int = 0) -> str:
    with Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES) as w:
        t = t0
        for n in sizes:
            w.append(data(t, n))
            t += n
    return str(loc)


def s3(server: Any, name: str = "v") -> str:
    return f"s3://{server.bucket}/joints-more-{uuid.uuid4().hex[:10]}/{name}"


def keys_of(server: Any) -> dict[str, str]:
    env = server.environment()
    return {
        "endpoint": server.endpoint,
        "access_key_id": env["AWS_ACCESS_KEY_ID"],
        "secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, HERE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def raised(call: Any) -> BaseException | None:
    """The exception ``call()`` raises (None if it returns)."""
    try:
        call()
    except Exception as err:
        return err
    return None


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from vault.cli.app import app

    return CliRunner().invoke(app, list(args))


# ------------------------------------------------------------------------ 1. odd characters
ODD = ["a b", "a+b", "a%20b", "50% ü [x]", "tab\tand'quote"]  # "a b" and "a%20b" must differ


def test_odd_characters_in_keys_round_trip_and_list_as_on_disk(vault_url: str) -> None:
    base = vault_url.rsplit("/", 1)[0]
    urls = [f"{base}/{name}/v" for name in ODD]
    for k, url in enumerate(urls):
        make(url, [2 + k, 3], t0=10 * k)
    for k, url in enumerate(urls):  # each name is its own place: nothing collides
        v = Vault.open(url)
        equal(v.read_numpy(), data(10 * k, 5 + k), url)
        assert str(v.location) == url
    found = vault.find_vaults(base)
    assert sorted(f.location for f in found) == sorted(urls)
    assert all(f.problem is None for f in found)
    listed = cli("ls", base, "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(e["path"] for e in json.loads(listed.output)) == sorted(urls)
    # a tag, a pinned read, a derived vault into another odd name, verify by the CLI
    src = urls[3]
    Vault.open(src).tag("first")
    with Vault.open(src, "a") as w:
        w.append(data(38, 2))
    equal(Vault.open(src, at="first").read_numpy(), data(30, 8))
    dest = f"{base}/out + 100%/sl ü"
    vault.derive_slice(Vault.open(src, at="first"), dest, rows=[1], start=2, stop=8)
    equal(Vault.open(dest).read_numpy(), {k: x[[1], 2:8] for k, x in data(30, 8).items()})
    checked = cli("verify", dest)
    assert checked.exit_code == 0, checked.output
    assert "sound" in checked.output


# ------------------------------------------------------------------- 2. datasets and the CLI
_VOLATILE = {"commit", "created", "disk_bytes", "ratio", "path", "location"}


def _stable(doc: Any) -> Any:
    """A ``--json`` document without what differs between two copies (commit ids, creation
    times, sizes on disk, paths)."""
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in _VOLATILE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def _fill(root: str) -> None:
    from vault.dataset._dataset import CATALOG_MIN_SHARDS

    for i in range(CATALOG_MIN_SHARDS):  # enough shards for their writers to keep a catalog
        ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **EPISODES)
        with ds.shard(f"s{i}") as w:
            w.append(data(100 * i, 2 + i % 3))
    Dataset.open(root).tag("cut")
    with Vault.open(f"{root}/shards/s0", "a") as w:  # grown after the catalog and the tag
        w.append(data(2, 3))
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **EPISODES)
    with ds.shard("zz") as w:  # added after them
        w.append(data(900, 4))


def test_the_cli_json_of_an_s3_dataset_with_its_catalog_equals_disk(
    s3_env: Any, tmp_path: Path
) -> None:
    roots = {"s3": s3(s3_env, "ds"), "disk": str(tmp_path / "ds")}
    for root in roots.values():
        _fill(root)
    got = Dataset.open(roots["s3"])
    assert got.check_catalog()["state"] == "valid"
    assert got.committed_lengths["s0"] == 5
    assert got.committed_lengths["zz"] == 4
    equal(got.read_numpy("s0"), data(0, 5))
    equal(got.read_numpy("zz"), data(900, 4))
    pinned = Dataset.open(roots["s3"], at="cut")
    assert "zz" not in pinned.shards
    equal(pinned.read_numpy("s0"), data(0, 2))
    commands = [
        ["info", "--json"],
        ["info", "--json", "--at", "cut"],
        ["stats", "--json"],
        ["episodes", "--json", "--open"],
        ["verify", "--json"],
        ["show", "--json", "-t", "0:2", "--at", "cut"],
        ["ls", "--json"],
    ]
    for command in commands:
        outs = {}
        for kind, root in roots.items():
            result = cli(command[0], root, *command[1:])
            assert result.exit_code == 0, (kind, command, result.output)
            outs[kind] = _stable(json.loads(result.output))
        assert outs["s3"] == outs["disk"], command
    sliced = cli("slice", roots["s3"], "-t", "0:2", "--out", s3(s3_env, "sliced"), "--json")
    assert sliced.exit_code == 0, sliced.output
    out = Dataset.open(json.loads(sliced.output)["path"])
    assert out.committed_lengths == dict.fromkeys(got.shards, 2)
    equal(out.read_numpy("zz"), data(900, 2))


# ------------------------------------------------------ 3. other processes: tags and a kill
def test_tags_from_another_process_while_appending_and_a_killed_writer_resumes(
    s3_env: Any,
) -> None:
    loc = make(s3(s3_env), [2])
    writer = Vault.open(loc, "a")
    t = 2
    tagger = child("tagger", loc, "5")
    deadline = time.monotonic() + 60
    while tagger.poll() is None and time.monotonic() < deadline:
        n = 1 + t % 3
        writer.append(data(t, n))
        t += n
        time.sleep(0.01)
    out, err = tagger.communicate(timeout=30)
    assert tagger.returncode == 0, err
    writer.close()
    seen = [line.split() for line in out.splitlines()]
    assert len(seen) == 5
    tags = Vault.open(loc).tags()
    for _, name, cid, shown in seen:
        assert tags[name] == cid
        pinned = Vault.open(loc, at=name)
        assert pinned.committed_length == int(shown)
        equal(pinned.read_numpy(), data(0, int(shown)), name)
    # a writer killed between appends: the next one continues from its last commit
    proc = child("writer", loc, str(t))
    assert proc.stdout is not None
    for _ in range(4):
        assert proc.stdout.readline().startswith("committed")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    with pytest.raises(vault.VaultLockedError):
        Vault.open(loc, "a")  # its lease runs on
    assert vault.break_lock(loc)
    length = Vault.open(loc).committed_length
    assert length >= t
    with Vault.open(loc, "a") as w:
        w.append(data(length, 5))
    final = Vault.open(loc)
    equal(final.read_numpy(), data(0, length + 5))
    for name in tags:  # every tag still reads its commit
        pinned = Vault.open(loc, at=name)
        equal(pinned.read_numpy(), data(0, pinned.committed_length), name)
    assert vault.verify(loc).ok


def test_a_shard_whose_create_was_killed_is_hidden_then_taken_over(s3_env: Any) -> None:
    root = s3(s3_env, "ds")
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, chunk=CHUNK, **EPISODES)
    with ds.shard("a") as w:
        w.append(data(0, 5))
    proc = child("shard-dies", root, "b")
    proc.communicate(timeout=60)
    assert proc.returncode == 9
    seen = Dataset.open(root)
    assert seen.shards == ["a"]
    listed = cli("ls", root, "--json")
    assert listed.exit_code == 0, listed.output
    assert [e["shard"] for e in json.loads(listed.output)] == ["a"]
    checked = cli("verify", root)
    assert checked.exit_code == 0, checked.output
    with pytest.raises(vault.VaultLockedError, match="being written by"):
        Dataset.open(root).shard("b")  # the dead creator's lease runs on
    assert vault.break_lock(f"{root}/shards/b")
    with Dataset.open(root).shard("b") as w:
        w.append(data(50, 3))
    again = Dataset.open(root)
    assert again.committed_lengths == {"a": 5, "b": 3}
    equal(again.read_numpy("b"), data(50, 3))


# ------------------------------------------------------------------ 4. typed location errors
def test_a_dataset_in_a_missing_bucket_is_refused_like_a_vault(s3_env: Any) -> None:
    bucket = f"no-such-{uuid.uuid4().hex[:8]}"
    with pytest.raises(VaultNotFoundError, match=re.escape(f"the bucket {bucket!r} does not")):
        Vault.create(f"s3://{bucket}/v", EXAMPLE, rows=ROWS)
    other = f"no-such-{uuid.uuid4().hex[:8]}"
    with pytest.raises(VaultNotFoundError, match=re.escape(f"the bucket {other!r} does not")):
        Dataset.create(f"s3://{other}/ds", EXAMPLE, rows=ROWS)


def test_an_invalid_bucket_name_is_a_typed_location_error(s3_env: Any) -> None:
    url = "s3://ab/runs/v"
    for call in (
        lambda: Vault.open(url),
        lambda: Vault.create(url, EXAMPLE, rows=ROWS),
        lambda: vault.find_vaults("s3://bucket..x/runs"),
    ):
        err = raised(call)
        assert isinstance(err, VaultLocationError), repr(err)
        assert "s3://" in str(err), str(err)
    shown = cli("info", url)
    assert shown.exit_code == 1, shown.output  # a location error's exit code
    assert "not a valid S3 bucket name" in shown.output
    assert "a bug in rlvault" not in shown.output


def test_dot_segments_in_an_s3_url_are_refused_by_name_or_work(s3_env: Any) -> None:
    base = s3(s3_env, "x")
    for url in (f"{base}/../v", f"{base}/./w"):
        err = raised(lambda u=url: make(u, [3]))
        if err is None:
            equal(Vault.open(url).read_numpy(), data(0, 3), url)
        else:  # refused by name: fine
            assert isinstance(err, VaultLocationError), repr(err)
            assert "'..'" in str(err) or "'.'" in str(err), str(err)


def test_a_destination_inside_its_source_is_refused_whatever_the_credentials(
    s3_env: Any,
) -> None:
    loc = make(s3(s3_env), [4])
    same_store = parse_location(loc, storage=keys_of(s3_env))  # the same bucket and endpoint
    with pytest.raises(VaultLocationError, match="inside the source"):
        vault.derive_slice(loc, parse_location(f"{loc}/inner", storage=keys_of(s3_env)))
    with pytest.raises(VaultLocationError, match="inside the source"):
        vault.derive_slice(same_store, f"{loc}/inner2", start=1)
    assert not any(
        k.startswith((b"inner/", b"inner2/")) for k in parse_location(loc).kvstore().list().result()
    )


def test_an_endpoint_that_accepts_but_never_answers_fails_fast(s3_env: Any) -> None:
    with socket.socket() as frozen:  # a server that hangs: the kernel accepts, nobody answers
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(8)
        proc = child("frozen", str(frozen.getsockname()[1]))
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("still waiting 5 s after the first request") from None
    assert proc.returncode == 0, err
    assert out.startswith("VaultStorageError"), out
    assert "s3://rlvault-frozen/p" in out


# ----------------------------------------------------------------------- child processes
def _child(mode: str, *args: str) -> None:
    if mode == "tagger":  # tag the latest commit N times while the parent appends
        loc, n = args[0], int(args[1])
        for k in range(n):
            v = Vault.open(loc)
            cid = v.tag(f"t{k}")
            equal(v.read_numpy(), data(0, v.committed_length))
            print("tag", f"t{k}", cid, v.committed_length, flush=True)
            time.sleep(0.03)
    elif mode == "writer":  # append until killed
        loc, t = args[0], int(args[1])
        w = Vault.open(loc, "a")
        for k in range(10_000):
            w.append(data(t, 1 + k % 3))
            t += 1 + k % 3
            print("committed", t, flush=True)
    elif mode == "shard-dies":  # die as the shard's manifest is about to be published

        def hook(point: str, info: dict[str, Any], step: Any) -> Any:
            if point == "create":
                os._exit(9)
            return step()

        vault.set_fault_hook(hook)
        ds = Dataset.create(args[0], EXAMPLE, rows=ROWS, chunk=CHUNK, exist_ok=True, **EPISODES)
        ds.shard(args[1])
    elif mode == "frozen":
        storage = {"endpoint": f"http://127.0.0.1:{args[0]}", "retries": 0, "connect_timeout": 1}
        try:
            Vault.open("s3://rlvault-frozen/p", storage=storage)
        except vault.VaultError as err:
            print(type(err).__name__, err, flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    _child(*sys.argv[1:])
