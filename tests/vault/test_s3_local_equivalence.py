"""The same operations on a vault on a local disk and on an S3 bucket (the real SeaweedFS
server of ``tests/conftest.py``) give the same results: every difference is a bug where the two
storage kinds meet the rest of the library.

One deterministic script builds two vaults on each storage kind:

* ``arrays``: leaves of several kinds (a float32 vector, an int64 scalar, a bool ``done``, a
  float32 reward, a nested dict of int16 and float64 leaves), uneven chunk shapes that cut
  rows, time and item axes; appends of 0, 1, about a chunk and a half and several chunks, a tag,
  a close and a reopen in mode ``"a"``, an append that does not continue its episodes, a
  second tag.
* ``buffer``: a trajectory buffer's state written with ``write()``: blocking and background
  writes, a writer closed and reopened on the same buffer, the ring wrapping between writes,
  and an overrun refused with ``on_overrun="error"`` (the same count lost, nothing written)
  then saved with ``"save_surviving"`` (a seam).

Both are then read every way (``read_numpy`` with rows, slices, ``last``, ``percentiles``,
leaf subsets; ``read(capacity=)``; episodes; windows; streams with and without a seed; pinned
commits), derived (``derive_slice``, ``derive_episodes``, ``combine``), checked (``verify``,
fingerprints, ``leaf_stats``) and shown by the ``vault`` command's ``--json`` (``info``,
``stats``, ``episodes``, ``show``, ``verify``, ``slice``, ``subsample``, ``combine``). The data
say where they belong (``act = 7 * (1000 * row + t)``), so the disk side is checked against
that model too.

Fields that legitimately differ and are left out of the comparisons: ``path``, ``source`` and
``sources`` (the locations themselves, also ``derived_from.source``); ``disk_bytes`` and
``ratio`` (an S3 listing carries no sizes: ``null`` there, as docs/guides/cli-tour.md says);
``created`` (the creation time); the random uid half of commit ids (``"<seq>-<uid>"``: the
sequence numbers are compared); a writer lock holder's ``since`` (when each writer started).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import buffers as fbx
import vault
from vault import UnsavedDataLostError, Vault
from vault.testing import S3TestServer

KINDS = ("disk", "s3")

# ----------------------------------------------------------------------------- the model
ROWS = 3
EXAMPLE = {
    "obs": np.zeros(3, np.float32),
    "act": np.zeros((), np.int64),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
    "info": {"x": np.zeros(2, np.int16), "y": {"z": np.zeros((), np.float64)}},
}
CHUNK: dict[
    str, Sequence[int]
] = {  # uneven: row blocks of 2 (the last holds one row), item axes cut
    "obs": [2, 5, 2],
    "act": [3, 7],
    "done": [2, 4],
    "reward": [1, 3],
    "info/x": [2, 6, 1],
    "info/y/z": [3, 5],
}
EPISODES: dict[str, Any] = {"done_leaf": "done", "reward_leaf": "reward"}
SIZES = [0, 1, 7, 16]  # before the reopen: nothing, one, a chunk and a half, several chunks
AFTER = 5  # appended after the reopen, as rows that do not continue their episodes
LENGTH = sum(SIZES) + AFTER


def data(t0: int, n: int) -> dict[str, Any]:
    """Timesteps ``[t0, t0 + n)`` of every row: each value says where it belongs."""
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    return {
        "obs": ((1000 * r + t)[..., None] + np.arange(3) / 8).astype(np.float32),
        "act": (7 * (1000 * r + t)).astype(np.int64),
        "done": (t + r) % 4 == 3,
        "reward": (0.5 * t - r).astype(np.float32),
        "info": {
            "x": ((100 * r + t)[..., None] * 2 + np.arange(2)).astype(np.int16),
            "y": {"z": (0.25 * t + r).astype(np.float64)},
        },
    }


def flat(tree: Any) -> dict[str, np.ndarray]:
    """``{leaf path: array}`` of a structure as the vault names its leaves."""
    out: dict[str, np.ndarray] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}/")
        else:
            out[prefix[:-1]] = np.asarray(node)

    walk(tree, "")
    return out


MODEL = flat(data(0, LENGTH))

# the buffer vault: JAX-friendly dtypes (no 64-bit leaves without jax_enable_x64)
B_EXAMPLE = {
    "obs": np.zeros(2, np.float32),
    "act": np.zeros((), np.int32),
    "done": np.zeros((), bool),
    "reward": np.zeros((), np.float32),
}
B_CHUNK: dict[str, Sequence[int]] = {
    "obs": [2, 5, 1],
    "act": [3, 4],
    "done": [1, 3],
    "reward": [3, 7],
}
RING = 6  # the buffer's time axis
STEP = 2  # timesteps per add


def b_data(t0: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(t0, t0 + n)[None, :]
    r = np.arange(ROWS)[:, None]
    return {
        "obs": ((1000 * r + t)[..., None] + np.arange(2) / 8).astype(np.float32),
        "act": (1000 * r + t).astype(np.int32),
        "done": (t + r) % 5 == 4,
        "reward": (0.5 * t - r).astype(np.float32),
    }


# -------------------------------------------------------------------------- building both
def build_arrays(loc: str) -> dict[str, Any]:
    log: dict[str, Any] = {}
    with Vault.create(
        loc, EXAMPLE, rows=ROWS, chunk=CHUNK, metadata={"run": [1, "é"]}, **EPISODES
    ) as v:
        t, appended = 0, []
        for n in SIZES:
            appended.append(v.append(data(t, n)))
            t += n
        log["appended"] = appended
        log["first"] = v.tag("first")
    with Vault.open(loc, "a") as v:
        log["after"] = v.append(data(t, AFTER), continues=False)
        log["second"] = v.tag("second")
    return log


@pytest.fixture(scope="module")
def add_fn() -> Any:
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=ROWS,
        sample_batch_size=2,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=RING,
    )
    return buffer, jax.jit(buffer.add)


def build_buffer(loc: str, buffer: Any, add: Any) -> dict[str, Any]:
    log: dict[str, Any] = {}
    state = buffer.init(jax.tree.map(jnp.asarray, B_EXAMPLE))
    t = 0

    def adds(count: int) -> None:
        nonlocal state, t
        for _ in range(count):
            state = add(state, jax.tree.map(jnp.asarray, b_data(t, STEP)))
            t += STEP

    writes = []
    with Vault.create(loc, state, chunk=B_CHUNK, **EPISODES) as v:
        adds(2)
        writes.append(v.write(state))
        adds(2)
        writes.append(v.write(state, block=False))  # in the background; close waits
    with Vault.open(loc, "a") as v:  # the same buffer continues after a reopen
        adds(3)  # 6 new timesteps: the ring of 6 wrapped since the last write
        writes.append(v.write(state))
        adds(5)  # 10 new timesteps in a ring of 6: 4 are gone
        with pytest.raises(UnsavedDataLostError) as lost:
            v.write(state)
        log["lost"] = str(lost.value).replace(loc, "<vault>")
        log["unchanged"] = v.committed_length
        writes.append(v.write(state, on_overrun="save_surviving"))
        log["tag"] = v.tag("wrapped")
    log["writes"] = writes
    return log


@pytest.fixture(scope="module")
def made(
    s3_server: S3TestServer, tmp_path_factory: pytest.TempPathFactory, add_fn: Any
) -> dict[str, dict[str, Any]]:
    """Both vaults on each storage kind, built by the same script; with what the writes
    returned."""
    bases = {
        "disk": str(tmp_path_factory.mktemp("equivalence")),
        "s3": f"s3://{s3_server.bucket}/equivalence-{uuid.uuid4().hex[:10]}",
    }
    out: dict[str, dict[str, Any]] = {}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in s3_server.environment().items():
            mp.setenv(key, value)
        for kind, base in bases.items():
            arrays, buffered = f"{base}/arrays", f"{base}/buffer"
            out[kind] = {
                "base": base,
                "arrays": arrays,
                "buffer": buffered,
                "arrays_log": build_arrays(arrays),
                "buffer_log": build_buffer(buffered, *add_fn),
            }
    return out


# ------------------------------------------------------------------------------- helpers
_COMMIT_ID = re.compile(r"\b(\d+)-[0-9a-f]{12}\b")
_VOLATILE = {"path", "source", "sources", "disk_bytes", "ratio", "created", "since"}


def stable(doc: Any) -> Any:
    """A document without what legitimately differs between storage kinds (see the module
    docstring): locations, sizes on disk, creation and lock times, commit uids."""
    if isinstance(doc, dict):
        return {k: stable(v) for k, v in doc.items() if k not in _VOLATILE}
    if isinstance(doc, list):
        return [stable(v) for v in doc]
    if isinstance(doc, str):
        return _COMMIT_ID.sub(r"\1-*", doc)
    return doc


def seq(commit: str) -> int:
    return int(commit.split("-", 1)[0])


def arrays_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray], where: str) -> None:
    assert sorted(a) == sorted(b), where
    for name in a:
        assert a[name].dtype == b[name].dtype, (where, name)
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{where}: {name}")


def both(made: dict[str, dict[str, Any]], name: str) -> dict[str, Vault]:
    return {kind: Vault.open(made[kind][name]) for kind in KINDS}


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from vault.cli.app import app

    return CliRunner().invoke(app, list(args))


def cli_json(*args: str) -> Any:
    result = cli(*args)
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.output)


def table(t: Any) -> dict[str, list[Any]]:
    columns = ("row", "start", "length", "returns", "truncated", "complete", "start_known")
    return {c: np.asarray(getattr(t, c)).tolist() for c in columns}


# ------------------------------------------------------------------------------ writing
def test_the_same_writes_return_the_same_counts_and_refuse_the_same_overrun(
    made: dict[str, dict[str, Any]],
) -> None:
    disk, s3 = made["disk"], made["s3"]
    assert disk["arrays_log"]["appended"] == SIZES
    assert disk["arrays_log"]["after"] == AFTER
    assert disk["buffer_log"]["writes"] == [4, 4, 6, RING]
    assert "4" in disk["buffer_log"]["lost"]  # the overrun says how many were lost
    for log in ("arrays_log", "buffer_log"):
        d, s = dict(disk[log]), dict(s3[log])
        for key in ("first", "second", "tag"):  # commit ids: the same sequence numbers
            if key in d:
                assert seq(d.pop(key)) == seq(s.pop(key)), key
        assert d == s, log


# ------------------------------------------------------------------------------ reading
def test_every_read_of_the_arrays_vault_is_the_model_on_both(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]]
) -> None:
    vaults = both(made, "arrays")
    selections: list[dict[str, Any]] = [
        {},
        {"rows": [2, 0], "start": 3, "stop": 17},
        {"rows": [1, 1, 0]},
        {"rows": slice(None, None, -1), "last": 6},
        {"rows": slice(0, ROWS, 2), "percentiles": (20, 70)},
        {"leaves": ["info/x", "act"], "start": 6, "stop": 9},
        {"start": LENGTH - 1},
    ]
    for sel in selections:
        got = {}
        for kind, v in vaults.items():
            out = v.read_numpy(**sel)
            got[kind] = out if "leaves" in sel else flat(out)
            assert got[kind].keys() == (set(sel["leaves"]) if "leaves" in sel else MODEL.keys())
        arrays_equal(got["disk"], got["s3"], f"read_numpy({sel})")
        rows = np.arange(ROWS)[sel["rows"]] if "rows" in sel else np.arange(ROWS)
        lo, hi = sel.get("start", 0), sel.get("stop", LENGTH)
        if "last" in sel:
            lo = LENGTH - sel["last"]
        if "percentiles" in sel:
            lo, hi = (LENGTH * p // 100 for p in sel["percentiles"])
        want = {k: MODEL[k][rows][:, lo:hi] for k in got["disk"]}
        arrays_equal(got["disk"], want, f"model of {sel}")


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(st.integers(0, ROWS - 1), min_size=1, max_size=4),
    lo=st.integers(0, LENGTH - 1),
    span=st.integers(1, LENGTH),
    capacity=st.integers(1, LENGTH + 4),
)
def test_random_row_and_time_selections_read_alike(
    s3_env: S3TestServer,
    made: dict[str, dict[str, Any]],
    rows: list[int],
    lo: int,
    span: int,
    capacity: int,
) -> None:
    hi = min(LENGTH, lo + span)
    vaults = both(made, "arrays")
    got = {
        k: v.read_numpy(rows=rows, start=lo, stop=hi, leaves=["act", "obs"])
        for k, v in vaults.items()
    }
    arrays_equal(got["disk"], got["s3"], f"rows={rows} [{lo}, {hi})")
    arrays_equal(got["s3"], {k: MODEL[k][rows][:, lo:hi] for k in ("act", "obs")}, "model")
    states = {
        k: v.read(rows=rows, start=lo, stop=hi, leaves=["act"], capacity=capacity)
        for k, v in vaults.items()
    }
    for name in ("current_index", "is_full"):
        assert int(getattr(states["disk"], name)) == int(getattr(states["s3"], name)), name
    np.testing.assert_array_equal(
        np.asarray(states["disk"].experience["act"]), np.asarray(states["s3"].experience["act"])
    )


def test_the_buffer_vault_reads_alike_with_its_seam(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]]
) -> None:
    vaults = both(made, "buffer")
    got = {k: v.read_numpy() for k, v in vaults.items()}
    arrays_equal(got["disk"], got["s3"], "buffer vault")
    # written: t 0..13 (writes of 4, 4, 6), then t 14..23 of which the ring kept 18..23
    kept = np.r_[0:14, 18:24]
    want = {k: v[:, kept] for k, v in b_data(0, 24).items()}
    arrays_equal(got["disk"], want, "model")
    assert [s.to_json() for s in vaults["disk"].seams] == [{"at": 14, "lost": 4}]
    assert [s.to_json() for s in vaults["s3"].seams] == [{"at": 14, "lost": 4}]


# ------------------------------------------------------------------- commits and indexes
@pytest.mark.parametrize("name", ["arrays", "buffer"])
def test_commits_tags_episodes_stats_and_verify_agree(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]], name: str
) -> None:
    vaults = both(made, name)
    facts: dict[str, dict[str, Any]] = {}
    for kind, v in vaults.items():
        t = v.episodes(include_open=True)
        report = vault.verify(v.location)
        facts[kind] = {
            "length": v.committed_length,
            "commit": seq(v.commit_id),
            "tags": {tag: seq(c) for tag, c in v.tags().items()},
            "fingerprint": v.fingerprint(),
            "seams": [s.to_json() for s in v.seams],
            "leaves": v.leaf_names,
            "metadata": v.metadata,
            "episode_leaves": v.episode_leaves,
            "episodes": table(t),
            "episode_stats": vault.episode_stats(t),
            "leaf_stats": [s.to_dict() for s in vault.leaf_stats(v)],
            "verify": (report.ok, [str(p) for p in report.problems]),
            "first_episode": flat(v.read_episode(0)) if len(v.episodes()) else None,
        }
    first_disk, first_s3 = facts["disk"].pop("first_episode"), facts["s3"].pop("first_episode")
    arrays_equal(first_disk, first_s3, "read_episode(0)")
    assert facts["disk"] == facts["s3"]
    assert facts["disk"]["verify"] == (True, [])


def test_pinned_commits_read_alike(s3_env: S3TestServer, made: dict[str, dict[str, Any]]) -> None:
    for tag, length in (("first", sum(SIZES)), ("second", LENGTH)):
        got, prints = {}, {}
        for kind in KINDS:
            pinned = Vault.open(made[kind]["arrays"], at=tag)
            assert pinned.committed_length == length, (kind, tag)
            got[kind] = flat(pinned.read_numpy())
            prints[kind] = pinned.fingerprint()
        arrays_equal(got["disk"], got["s3"], tag)
        assert prints["disk"] == prints["s3"], tag
        arrays_equal(got["s3"], {k: v[:, :length] for k, v in MODEL.items()}, tag)


# ------------------------------------------------------------------------------ streams
def _batches(v: Vault, **options: Any) -> list[tuple[Any, ...]]:
    with v.as_dataset(4, 3, device_put=False, **options) as stream:
        return [
            (
                np.asarray(b.experience["act"]).tolist(),
                np.asarray(b.row).tolist(),
                np.asarray(b.start).tolist(),
            )
            for b in stream
        ]


def _windows(v: Vault, **options: Any) -> list[tuple[Any, ...]]:
    with v.iter_windows(7, **options) as windows:
        return [
            (np.asarray(w.experience["act"]).tolist(), int(w.current_index), bool(w.is_full))
            for w in windows
        ]


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": False},
        {"shuffle": True, "seed": 5},
        {"shuffle": True, "seed": 1, "episode_aware": True, "drop_remainder": False},
        {"shuffle": True, "seed": 2, "block_timesteps": 4, "interleave": 2, "rows": [0, 2]},
    ],
    ids=["ordered", "seeded", "episode-aware", "blocks"],
)
def test_streams_and_windows_yield_the_same_items_for_the_same_seed(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]], options: dict[str, Any]
) -> None:
    names = ["arrays", "buffer"] if len(options) <= 2 else ["arrays"]
    for name in names:
        vaults = both(made, name)
        got = {k: _batches(v, **options) for k, v in vaults.items()}
        assert got["disk"], name
        assert got["disk"] == got["s3"], (name, options)
        if options.get("seed") == 5 and name == "arrays":
            assert _batches(vaults["s3"], **options) == got["s3"], "the same seed twice"
    if options != {"shuffle": False}:
        return
    windows = {
        k: (_windows(v, shuffle=False), _windows(v, shuffle=True, seed=3, capacity=9))
        for k, v in both(made, "arrays").items()
    }
    assert windows["disk"] == windows["s3"]
    firsts = [w[0][0][0] for w in windows["disk"][0]]
    assert firsts == [7 * t for t in range(0, LENGTH, 7)]


# ------------------------------------------------------------------------------ derive
def test_derived_vaults_agree(s3_env: S3TestServer, made: dict[str, dict[str, Any]]) -> None:
    facts: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        base, src = made[kind]["base"], Vault.open(made[kind]["arrays"])
        other = Vault.open(made[kind]["arrays"], at="first")
        outs = {
            "slice": vault.derive_slice(src, f"{base}/d-slice", rows=[2, 0], start=5, stop=27),
            "episodes": vault.derive_episodes(
                src, f"{base}/d-episodes", src.episodes().select(min_length=2, top_k=7)
            ),
            "combine": vault.combine([src, other], f"{base}/d-combine"),
        }
        facts[kind] = {}
        for op, derived in outs.items():
            d = Vault.open(derived.location)
            meta = d.metadata
            assert meta["derived_from"].pop("source") == src.location, (kind, op)
            if op == "combine":  # every source, each its location (the storage's own)
                listed = [x.pop("source") for x in meta["derived_from"]["sources"]]
                assert listed == [src.location, other.location], kind
            report = vault.verify(d.location)
            facts[kind][op] = {
                "rows": d.rows,
                "length": d.committed_length,
                "fingerprint": d.fingerprint(),
                "seams": [s.to_json() for s in d.seams],
                "episodes": table(d.episodes(include_open=True)),
                "metadata": meta,
                "data": {k: v.tolist() for k, v in flat(d.read_numpy()).items()},
                "verify": (report.ok, [str(p) for p in report.problems]),
            }
    assert facts["disk"]["slice"]["data"]["act"] == MODEL["act"][[2, 0], 5:27].tolist()
    assert facts["disk"] == facts["s3"]


# ------------------------------------------------------------------------------ the CLI
CLI_READS = [
    ["info", "--json"],
    ["info", "--json", "--at", "first"],
    ["stats", "--json"],
    ["episodes", "--json", "--open"],
    ["episodes", "--json", "--sort", "return", "--head", "4"],
    ["show", "--json", "-t", "2:9", "-r", "0,2"],
    ["show", "--json", "--leaf", "info/y/z", "-t", "-4:"],
    ["verify", "--json"],
]


@pytest.mark.parametrize("command", CLI_READS, ids=lambda c: " ".join(c))
def test_the_cli_json_of_both_vaults_agrees_field_by_field(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]], command: list[str]
) -> None:
    for name in ("arrays", "buffer"):
        if name == "buffer" and ("--at" in command or "--leaf" in command):
            continue  # no tag "first", no leaf info/y/z there
        docs = {k: cli_json(command[0], made[k][name], *command[1:]) for k in KINDS}
        assert docs["disk"]["path"] == made["disk"][name]
        assert docs["s3"]["path"] == made["s3"][name]
        assert stable(docs["disk"]) == stable(docs["s3"]), (name, command)
    if command[:2] == ["info", "--json"] and len(command) == 2:
        # what was left out: sizes on disk are known on disk only (documented: null on S3)
        assert isinstance(docs["disk"]["disk_bytes"], int)
        assert docs["s3"]["disk_bytes"] is None


def test_the_cli_derives_alike(s3_env: S3TestServer, made: dict[str, dict[str, Any]]) -> None:
    docs = {}
    for kind in KINDS:
        base, src = made[kind]["base"], made[kind]["arrays"]
        docs[kind] = [
            cli_json("slice", src, "--out", f"{base}/c-slice", "-t", "3:-2", "-r", "1,2", "--json"),
            cli_json("subsample", src, "--out", f"{base}/c-sub", "--top-k", "3", "--json"),
            cli_json("combine", src, src, "--out", f"{base}/c-comb", "--json"),
        ]
        docs[kind].append(cli_json("info", f"{base}/c-sub", "--json"))
    assert stable(docs["disk"]) == stable(docs["s3"])
    assert docs["s3"][0]["committed"] == LENGTH - 5


def test_a_held_writer_is_reported_alike(
    s3_env: S3TestServer, made: dict[str, dict[str, Any]]
) -> None:
    holders = {}
    for kind in KINDS:
        with Vault.open(made[kind]["buffer"], "a"):
            doc = cli_json("info", made[kind]["buffer"], "--json")
            holders[kind] = doc["writer"]
            lib = vault.lock_holder(made[kind]["buffer"])
            assert lib is not None, kind
            assert lib.pid == doc["writer"]["holder"]["pid"], kind
        assert vault.lock_holder(made[kind]["buffer"]) is None, kind  # released by close
    assert holders["disk"]["held"] is True
    assert stable(holders["disk"]) == stable(holders["s3"])


# ----------------------------------------------------------------------------- listing
NAMES = ["run-2", "run", "run.3", "run_4", "run 5", "Run"]


def test_find_vaults_lists_in_location_order_on_s3_as_on_disk(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    bases = {
        "disk": str(tmp_path / "runs"),
        "s3": f"s3://{s3_env.bucket}/ls-{uuid.uuid4().hex[:10]}",
    }
    found = {}
    for kind, base in bases.items():
        for name in NAMES:
            Vault.create(f"{base}/{name}", {"x": np.float32(0)}, rows=1).close()
        found[kind] = [f.location[len(base) + 1 :] for f in vault.find_vaults(base)]
        listed = cli_json("ls", base, "--json")  # the CLI sorts again: the same on both
        assert [e["path"][len(base) + 1 :] for e in listed] == sorted(NAMES), kind
    assert found["disk"] == sorted(NAMES)  # "sorted by location"
    assert found["s3"] == found["disk"]
