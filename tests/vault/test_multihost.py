"""Streams over several sources (vaults of one structure) and over several JAX processes.

Real vaults in a temp dir; the multi-process test runs two real processes under
``jax.distributed`` (coordinator on loopback, CPU devices, gloo collectives) with
tests/vault/_multihost_child.py, and compares them with single-process runs of the same
streams.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import vault
from vault import Vault, VaultArgumentError, VaultReadError, VaultStructureError
from vault.stream._stream import as_dataset
from vault.stream._windows import iter_windows

sys.path.insert(0, str(Path(__file__).parent))
from _sources import CODE, SOURCE, make_source, valid_starts

CHILD = Path(__file__).with_name("_multihost_child.py")


@pytest.fixture
def sources(tmp_path: Path) -> list[Vault]:
    """Three vaults of one structure written separately: different lengths and rows, one
    with a seam."""
    return [
        make_source(tmp_path / "a", 0, 40),
        make_source(tmp_path / "b", 1, 23, seam=11),
        make_source(tmp_path / "c", 2, 70, rows=3),
    ]


def origins(batches: Any, seq: int) -> list[tuple[int, int, int]]:
    """(source, row, start) of every sequence, checking each one's data on the way."""
    seen = []
    for b in batches:
        code = np.asarray(b.experience["code"])
        want = (b.source * SOURCE + b.row * CODE + b.start)[:, None] + np.arange(seq)
        np.testing.assert_array_equal(code, want)
        np.testing.assert_array_equal(np.asarray(b.experience["obs"])[..., 1], -want)
        seen += list(zip(b.source.tolist(), b.row.tolist(), b.start.tolist(), strict=True))
    return seen


CONFIGS = [
    (3, {"shuffle": False, "block_timesteps": 16}),
    (3, {"block_timesteps": 8, "interleave": 2}),
    (1, {"block_timesteps": 16, "interleave": 3, "prefetch": 0}),
    (2, {"block_timesteps": 8, "stride": 3, "run_blocks": 2}),
    (4, {"block_timesteps": 8, "episode_aware": True, "interleave": 2}),
]


# --------------------------------------------------------------------------------------------
# several sources
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("seq", "kw"), CONFIGS)
def test_an_epoch_visits_every_valid_start_of_every_source_once(
    sources: list[Vault], seq: int, kw: dict[str, Any]
) -> None:
    snaps = [v.snapshot for v in sources]
    stream = as_dataset(snaps, 5, seq, drop_remainder=False, device_put=False, seed=2, **kw)
    assert stream.sources == 3
    assert stream.length == 40 + 23 + 70
    seen = origins(stream, seq)
    want = valid_starts(sources, seq, kw.get("stride", 1), kw.get("episode_aware", False))
    assert len(seen) == len(want)  # nothing twice ...
    assert set(seen) == want  # ... nothing missing
    assert {s for s, _, _ in seen} == {0, 1, 2}


def test_several_sources_are_deterministic_for_a_seed(sources: list[Vault]) -> None:
    snaps = [v.snapshot for v in sources]

    def run(seed: int, prefetch: int) -> list[tuple[int, list[int], list[int], list[int]]]:
        stream = as_dataset(
            snaps,
            4,
            3,
            seed=seed,
            prefetch=prefetch,
            epochs=2,
            block_timesteps=8,
            interleave=2,
            device_put=False,
        )
        return [(b.epoch, b.source.tolist(), b.row.tolist(), b.start.tolist()) for b in stream]

    first = run(5, 2)
    assert run(5, 0) == first
    assert run(6, 2) != first
    epochs = [[x[1:] for x in first if x[0] == e] for e in (0, 1)]
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    mixed = [len(set(sources_)) for _, sources_, _, _ in first]
    assert max(mixed) > 1  # a batch draws from several sources


def test_a_single_vault_streams_as_before_with_source_zero(sources: list[Vault]) -> None:
    one = sources[0]
    kw: dict[str, Any] = {"seed": 3, "block_timesteps": 8, "interleave": 2, "device_put": False}
    alone = list(one.as_dataset(4, 3, **kw))
    listed = list(as_dataset([one.snapshot], 4, 3, **kw))
    assert [b.row.tolist() for b in alone] == [b.row.tolist() for b in listed]
    assert [b.start.tolist() for b in alone] == [b.start.tolist() for b in listed]
    assert all((b.source == 0).all() and b.source.dtype == np.int64 for b in alone)


def test_sources_of_another_structure_are_refused(sources: list[Vault], tmp_path: Path) -> None:
    other = Vault.create(str(tmp_path / "o"), {"code": np.int64(0), "obs": np.zeros(3)}, rows=2)
    other.append({"code": np.zeros((2, 30), np.int64), "obs": np.zeros((2, 30, 3))})
    with pytest.raises(VaultStructureError, match="must have one structure") as err:
        as_dataset([sources[0].snapshot, other.snapshot], 4, 2)
    text = str(err.value)
    assert "leaf code is [] int64, expected [] int32" in text
    assert "leaf obs is [3] float64, expected [2] float32" in text
    assert "no leaf done" in text
    with pytest.raises(VaultStructureError, match="must have one structure"):
        iter_windows([other.snapshot, sources[0].snapshot], 8)
    with pytest.raises(VaultArgumentError, match=re.escape("must be Snapshots, got [1] Vault")):
        as_dataset([sources[0].snapshot, sources[1]], 4, 2)  # type: ignore[list-item]
    with pytest.raises(VaultArgumentError, match="an empty sequence"):
        as_dataset([], 4, 2)


def test_sources_shorter_than_a_sequence_are_skipped(sources: list[Vault], tmp_path: Path) -> None:
    short = make_source(tmp_path / "s", 3, 4)
    snaps = [sources[0].snapshot, short.snapshot]
    seen = origins(as_dataset(snaps, 4, 6, drop_remainder=False, device_put=False), 6)
    assert set(seen) == valid_starts([sources[0], short], 6)
    assert {s for s, _, _ in seen} == {0}
    with pytest.raises(
        VaultReadError,
        match=re.escape(
            "each of the 2 sources: sequences of 41 timesteps need at least 41 committed "
            "timesteps per row; the longest has 40"
        ),
    ):
        as_dataset(snaps, 4, 41)


def test_windows_visit_every_timestep_of_every_source_once(
    sources: list[Vault], tmp_path: Path
) -> None:
    two = [sources[0].snapshot, sources[1].snapshot]  # two rows each
    windows = iter_windows(two, 16, shuffle=True, seed=4, epochs=2, leaves=["code"])
    order = [windows.windows(0), windows.windows(1)]
    assert sorted(order[0]) == [(0, 0, 16), (0, 16, 32), (0, 32, 40), (1, 0, 16), (1, 16, 23)]
    assert order[0] != order[1]
    assert windows.ranges(1) == [(lo, hi) for _, lo, hi in order[1]]
    states = list(windows)
    assert len(states) == 10
    for state, (s, lo, hi) in zip(states, order[0] + order[1], strict=True):
        code = np.asarray(state.experience["code"])
        n = hi - lo
        want = s * SOURCE + np.arange(2)[:, None] * CODE + np.arange(lo, hi)
        np.testing.assert_array_equal(code[:, :n], want)
    with pytest.raises(VaultStructureError, match="every source needs 2 rows selected"):
        iter_windows([sources[0].snapshot, sources[2].snapshot], 8)


def test_a_stream_over_several_sources_resumes_in_a_new_process(sources: list[Vault]) -> None:
    snaps = [v.snapshot for v in sources]
    kw: dict[str, Any] = {"seed": 7, "epochs": 2, "block_timesteps": 8, "interleave": 2}
    kw["device_put"] = False
    reference = [
        (b.epoch, b.source.tolist(), b.row.tolist(), b.start.tolist())
        for b in as_dataset(snaps, 5, 3, **kw)
    ]
    stream = as_dataset(snaps, 5, 3, **kw)
    taken = [next(stream) for _ in range(len(reference) // 2 + 3)]
    state = stream.state()
    stream.close()
    assert [s["location"] for s in state["sources"]] == [v.location for v in sources]
    assert [s["commit"] for s in state["sources"]] == [v.commit_id for v in sources]
    saved = json.dumps(state)
    more = make_source(Path(sources[1].location).with_name("more"), 1, 30)  # appended since:
    sources[1].append(more.read_numpy(stop=30))  # the resumed stream reads the pinned data
    code = (
        "import json, sys\n"
        "import vault\n"
        "s = vault.resume_stream(json.loads(sys.argv[1]))\n"
        "print(json.dumps([(b.epoch, b.source.tolist(), b.row.tolist(), b.start.tolist())"
        " for b in s]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, saved], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rest = [tuple(x) for x in json.loads(done.stdout)]
    got = [(b.epoch, b.source.tolist(), b.row.tolist(), b.start.tolist()) for b in taken]
    assert got + rest == reference


# --------------------------------------------------------------------------------------------
# several processes, computed in one
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize(("seq", "kw"), CONFIGS)
def test_process_shares_are_disjoint_equal_and_cover_the_epoch(
    sources: list[Vault], processes: int, seq: int, kw: dict[str, Any]
) -> None:
    snaps = [v.snapshot for v in sources]
    want = valid_starts(sources, seq, kw.get("stride", 1), kw.get("episode_aware", False))
    local = 2
    shares, counts = [], []
    for p in range(processes):
        stream = as_dataset(
            snaps,
            local * processes,
            seq,
            process_index=p,
            process_count=processes,
            epochs=2,
            drop_remainder=False,
            device_put=False,
            seed=9,
            **kw,
        )
        assert (stream.process_index, stream.process_count) == (p, processes)
        assert stream.local_batch_size == local
        batches = list(stream)
        assert all(len(b.row) <= local for b in batches)
        counts.append([len([b for b in batches if b.epoch == e]) for e in (0, 1)])
        shares.append([(b.epoch, origins([b], seq)) for b in batches])
    assert all(c == counts[0] for c in counts)  # the same number of batches everywhere
    for epoch in (0, 1):
        parts = [[x for e, seen in share if e == epoch for x in seen] for share in shares]
        assert all(len(part) == len(want) // processes for part in parts)  # equal shares
        union = [x for part in parts for x in part]
        assert len(set(union)) == len(union)  # disjoint
        assert set(union) <= want
        assert len(want) - len(union) < processes  # only the last few are dropped


def test_process_shares_read_only_their_blocks(sources: list[Vault]) -> None:
    """Every process reads its share's blocks (a block at each end of the share may be read
    by its neighbour too), not the whole epoch."""
    from vault.stream._layout import Layout

    snaps = [v.snapshot for v in sources]
    common: dict[str, Any] = {
        "rows": None,
        "leaves": None,
        "end_leaves": [],
        "stride": 1,
        "block_timesteps": 8,
        "block_rows": None,
        "run_blocks": None,
        "interleave": 2,
        "shuffle": True,
        "seed": 1,
    }
    read = []
    for p in range(2):
        lay = Layout(snaps, 2, process=(p, 2), **common)
        blocks = {b for group in lay.epoch(0).groups for b in group}
        read.append(blocks)
    shared = read[0] & read[1]
    assert len(shared) <= 1  # only the block at the boundary
    assert read[0] | read[1] == set(range(lay.n_blocks))
    counts = lay.counts
    assert counts is not None
    for blocks in read:  # the sequences of the blocks it alone reads: at most its share
        assert int(counts[sorted(blocks - shared)].sum()) <= int(counts.sum()) // 2


def test_one_process_with_a_sharding_yields_global_arrays(sources: list[Vault]) -> None:
    assert not jax.distributed.is_initialized()
    devices = jax.devices()
    assert len(devices) == 2  # tests/conftest.py fakes two CPU devices
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    snaps = [v.snapshot for v in sources]
    kw: dict[str, Any] = {"seed": 1, "block_timesteps": 8, "interleave": 2}
    plain = list(as_dataset(snaps, 6, 3, device_put=False, **kw))
    sharded = as_dataset(snaps, 6, 3, sharding=sharding, **kw)
    assert (sharded.process_index, sharded.process_count, sharded.local_batch_size) == (0, 1, 6)
    step = jax.jit(lambda e: jnp.sum(e["code"], axis=1))
    count = 0
    for a, b in zip(plain, sharded, strict=True):
        code = b.experience["code"]
        assert isinstance(code, jax.Array)
        assert code.sharding == sharding
        assert {s.device for s in code.addressable_shards} == set(devices)
        np.testing.assert_array_equal(np.asarray(code), a.experience["code"])
        np.testing.assert_array_equal(step(b.experience), a.experience["code"].sum(axis=1))
        assert b.row.tolist() == a.row.tolist()
        count += 1
    assert count == len(plain) > 10


def test_multihost_argument_errors(sources: list[Vault]) -> None:
    snaps = [v.snapshot for v in sources]
    with pytest.raises(VaultArgumentError, match=re.escape("5 does not split evenly over 2")):
        as_dataset(snaps, 5, 2, process_index=0, process_count=2)
    with pytest.raises(VaultArgumentError, match="give both process_index and process_count"):
        as_dataset(snaps, 4, 2, process_index=1)
    with pytest.raises(VaultArgumentError, match=re.escape("in [0, process_count) = [0, 2)")):
        as_dataset(snaps, 4, 2, process_index=2, process_count=2)
    with pytest.raises(VaultArgumentError, match=re.escape("must be a jax.sharding.Sharding")):
        as_dataset(snaps, 4, 2, sharding="data")
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    with pytest.raises(VaultArgumentError, match=re.escape("gives this process 8 of the 8")):
        as_dataset(snaps, 8, 2, sharding=replicated, process_index=0, process_count=2)
    split = NamedSharding(mesh, PartitionSpec("data"))
    with pytest.raises(VaultArgumentError, match="give drop_remainder=True"):
        as_dataset(snaps, 4, 2, sharding=split, drop_remainder=False)
    stream = as_dataset(snaps, 4, 2, process_index=1, process_count=2, device_put=False)
    next(stream)
    state = stream.state()
    stream.close()
    assert state["args"]["process_count"] == 2
    assert "process_index" not in state["args"]
    with pytest.raises(VaultArgumentError, match="shared by 2 processes; this run has 1"):
        vault.resume_stream(state)
    resumed = vault.resume_stream(state, process_index=1)
    again = as_dataset(snaps, 4, 2, process_index=1, process_count=2, device_put=False)
    next(again)
    assert next(resumed).start.tolist() == next(again).start.tolist()
    resumed.close()
    again.close()


# --------------------------------------------------------------------------------------------
# two real processes under jax.distributed
# --------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_processes(config: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    config = {**config, "mode": mode, "port": free_port()}
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  # two devices per process
    env["PYTHONPATH"] = os.pathsep.join([str(Path(vault.__file__).parents[1]), *sys.path])
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(config), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(config["processes"])
    ]
    try:
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-3000:]
    out = Path(config["out"])
    return [json.loads((out / f"{mode}-{i}.json").read_text()) for i in range(2)]


def test_two_processes_split_each_epoch_and_resume_from_one_state(
    sources: list[Vault], tmp_path: Path
) -> None:
    batch, seq, processes = 8, 3, 2
    kw: dict[str, Any] = {"seed": 11, "epochs": 2, "block_timesteps": 8, "interleave": 2}
    config = {
        "processes": processes,
        "vaults": [v.location for v in sources],
        "batch": batch,
        "seq": seq,
        "kwargs": kw,
        "stop_after": 7,
        "out": str(tmp_path),
    }
    ran = run_processes(config, "run")
    assert [r["process_index"] for r in ran] == [0, 1]
    assert all(r["devices"] == 4 and r["process_count"] == 2 for r in ran)
    assert all(r["local_batch_size"] == batch // processes for r in ran)

    # The single-process run of the same streams: each process's share, read in this process.
    snaps = [v.snapshot for v in sources]
    reference = [
        list(
            as_dataset(snaps, batch, seq, process_index=p, process_count=2, device_put=False, **kw)
        )
        for p in range(processes)
    ]
    steps = len(reference[0])
    assert steps > 20
    assert all(
        len(r["batches"]) == len(ref) == steps for r, ref in zip(ran, reference, strict=True)
    )
    weights = np.arange(1, batch + 1)[:, None]
    for k in range(steps):
        parts = [ref[k] for ref in reference]
        for r, part in zip(ran, parts, strict=True):
            got = r["batches"][k]
            assert (got["source"], got["row"], got["start"]) == (
                part.source.tolist(),
                part.row.tolist(),
                part.start.tolist(),
            )
        code = np.concatenate([part.experience["code"] for part in parts])  # global rows
        want = int((code * weights).sum()) + int((code > 0).sum())
        assert ran[0]["batches"][k]["value"] == ran[1]["batches"][k]["value"] == want

    # Disjoint shares that cover each epoch (less fewer than 2 sequences, and each share's
    # last incomplete batch).
    valid = valid_starts(sources, seq)
    for epoch in (0, 1):
        seen = [
            [
                (s, r_, t)
                for b in r["batches"]
                if b["epoch"] == epoch
                for s, r_, t in zip(b["source"], b["row"], b["start"], strict=True)
            ]
            for r in ran
        ]
        union = seen[0] + seen[1]
        assert len(set(union)) == len(union)
        assert set(union) <= valid
        share = len(valid) // processes
        assert len(seen[0]) == len(seen[1]) == share // (batch // 2) * (batch // 2)
        assert len(valid) - len(union) < processes + processes * (batch // 2)

    # Stopped after 7 batches, process 0's state resumes both processes in new processes.
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["epoch"], state["batch"]) == (0, 7)
    resumed = run_processes(config, "resume")
    for r, run in zip(resumed, ran, strict=True):
        assert run["taken"] + r["batches"] == run["batches"]


def test_a_state_of_the_first_format_still_resumes(sources: list[Vault]) -> None:
    """States saved before streams had several sources (format 1: one location and commit,
    no process count) resume as they did."""
    one = sources[0]
    args: dict[str, Any] = {
        "sample_batch_size": 4, "sequence_length": 3, "shuffle": True, "seed": 2, "prefetch": 1,
        "episode_aware": False, "stride": 1, "block_timesteps": 8, "block_rows": None,
        "interleave": 2, "run_blocks": None, "rows": None, "leaves": None, "epochs": 1,
        "drop_remainder": True, "device_put": False,
    }  # fmt: skip
    old = {"format": "rlvault-stream/1", "location": one.location, "commit": one.commit_id}
    old.update({"args": args, "epoch": 0, "batch": 5})
    reference = [b.start.tolist() for b in one.as_dataset(**args)]
    resumed = [b.start.tolist() for b in vault.resume_stream(old)]
    assert resumed == reference[5:]
    assert len(resumed) > 5


def test_a_dataset_of_shards_streams_and_resumes_over_every_shard(tmp_path: Path) -> None:
    example = {"code": np.int32(0), "obs": np.zeros(2, np.float32)}
    dataset = vault.Dataset.create(tmp_path / "ds", example, rows=2)
    for s, length in enumerate((30, 17)):
        shard = dataset.shard(f"w{s}")
        code = s * SOURCE + np.arange(2)[:, None] * CODE + np.arange(length)[None]
        obs = np.stack([code, -code], -1).astype(np.float32)
        shard.append({"code": code.astype(np.int32), "obs": obs})
        shard.close()
    opened = vault.Dataset.open(tmp_path / "ds")
    kw: dict[str, Any] = {"seed": 1, "block_timesteps": 8, "device_put": False}
    seen = origins(opened.as_dataset(4, 3, drop_remainder=False, **kw), 3)
    assert len(seen) == len(set(seen)) == 2 * 28 + 2 * 15
    assert {s for s, _, _ in seen} == {0, 1}
    reference = [b.start.tolist() for b in opened.as_dataset(4, 3, **kw)]
    stream = opened.as_dataset(4, 3, **kw)
    next(stream)
    state = stream.state()
    stream.close()
    assert len(state["sources"]) == 2
    assert [b.start.tolist() for b in vault.resume_stream(state)] == reference[1:]
