"""Where the writing options meet: ``Vault.create`` options (codec and level, chunk shapes for
some leaves, the done/truncated/reward leaves, metadata, rows) x ``append`` of numpy and JAX
arrays (``continues=True/False``, zero timesteps) x ``write(state)`` of buffer states (ours and
Flashbax-shaped; ``block=True/False``, ``new_buffer``, ``on_overrun``), with ``flush()``,
``close()`` and ``Vault.open(mode="a")`` between; a writer given another buffer, or another
buffer's shape; states that wrapped exactly at a write boundary; dtypes that need care (bool,
uint8, float16, int64); the reference-style constructor's ``compression``; refusals while a
background write is queued; and ``verify`` of what was written.

The model: timestep ``t`` of row ``r`` of run ``salt`` holds values that say where they belong
(``obs = [100_000 * salt + 1000 * r + t, -...]``, ``act = (7t + r + salt) % 251``, ...), so a
timestep stored twice, out of order, in the wrong row or not at all shows as a mismatch. Buffer
states are built by hand from that model (a ring of ``T`` slots holding the last ``T``
timesteps, with its write counter), as the docs allow; the episode index is compared with a
brute-force walk over the stored flags and the seams.

Tests marked ``xfail(strict=True)`` pin bugs (see their reasons).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import buffers as fbx
import vault
from vault import (
    Seam,
    UnsavedDataLostError,
    Vault,
    VaultArgumentError,
    VaultError,
    VaultStructureError,
)

ROWS, T = 2, 6
ROLES: dict[str, Any] = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "rew"}


# ------------------------------------------------------------------------------- the model
def steps(lo: int, hi: int, salt: int = 0, rows: int = ROWS) -> dict[str, np.ndarray]:
    """Timesteps ``[lo, hi)`` of every row of run ``salt``, ``[rows, n, ...]`` per leaf."""
    t = np.arange(lo, hi)[None, :]
    r = np.arange(rows)[:, None]
    code = 100_000 * salt + 1000 * r + t
    return {
        "obs": np.stack([code, -code], -1).astype(np.float32),
        "act": ((7 * t + r + salt) % 251).astype(np.uint8),
        "done": (t + r) % 5 == 4,
        "trunc": ((t + 2 * r) % 7 == 6) & ((t + r) % 5 != 4),
        "rew": (((t + r) % 4) * 0.5 - 0.5).astype(np.float16),
        "big": (code * (1 << 33) + 5).astype(np.int64),
    }


def example() -> dict[str, np.ndarray]:
    return {k: x[0, 0] for k, x in steps(0, 1).items()}


def joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def ring_state(counter: int, salt: int = 0, time_len: int = T, rows: int = ROWS) -> Any:
    """A trajectory buffer of ``time_len`` slots after ``counter`` adds of run ``salt``."""
    lo = max(0, counter - time_len)
    held = steps(lo, counter, salt, rows)
    experience = {}
    for key, values in held.items():
        ring = np.zeros((rows, time_len, *values.shape[2:]), values.dtype)
        for i, t in enumerate(range(lo, counter)):
            ring[:, t % time_len] = values[:, i]
        experience[key] = ring
    return fbx.TrajectoryBufferState(
        experience=experience,
        current_index=jnp.int32(counter % time_len),
        is_full=jnp.bool_(counter >= time_len),
        write_counter=fbx.write_counter_from_int(counter),
    )


def model_episodes(
    data: dict[str, np.ndarray], seams: list[Seam], buffers_from: tuple[int, ...] = ()
) -> set[tuple[int, int, int, float, bool, bool]]:
    """(row, start, length, return, start_known, truncated) of every complete episode of the
    stored ``data``: one ends at a done or truncated flag (truncated only when not done); none
    runs across a seam; after a seam with lost timesteps, or where another buffer's timesteps
    begin (``buffers_from``: it may have been started mid-episode), the next one's start is
    unknown."""
    cut = {s.at: s.lost for s in seams}
    out = set()
    for row in range(data["done"].shape[0]):
        start, known = 0, True
        for t in range(data["done"].shape[1]):
            if t in cut and t > 0:
                start, known = t, cut[t] == 0 and t not in buffers_from
            done, trunc = bool(data["done"][row, t]), bool(data["trunc"][row, t])
            if done or trunc:
                ret = float(np.sum(data["rew"][row, start : t + 1].astype(np.float64)))
                out.add((row, start, t + 1 - start, ret, known, trunc and not done))
                start, known = t + 1, True
    return out


def episodes_of(table: Any) -> set[tuple[int, int, int, float, bool, bool]]:
    cols = zip(
        table.row,
        table.start,
        table.length,
        table.returns,
        table.start_known,
        table.truncated,
        strict=True,
    )
    return {(int(r), int(s), int(n), float(g), bool(k), bool(c)) for r, s, n, g, k, c in cols}


def assert_stored(where: Path, want: dict[str, np.ndarray]) -> Vault:
    """The vault holds exactly ``want`` (dtypes and bytes) and verifies clean."""
    r = Vault.open(where)
    got = r.read_numpy()
    assert r.committed_length == next(iter(want.values())).shape[1]
    for key, values in want.items():
        assert got[key].dtype == values.dtype, key
        np.testing.assert_array_equal(got[key], values, strict=True, err_msg=key)
    report = vault.verify(where)
    assert report.ok, report.problems
    return r


# ------------------------------------------------------- 1. every option x every write path
def test_create_options_across_background_writes_overruns_reopens_and_appends(
    tmp_path: Path,
) -> None:
    """One vault with an explicit codec and level, chunks for some leaves, every episode leaf
    and metadata, written by background writes, a refused then surviving overrun, writes of
    nothing new, a reopen with exactly a ring's worth added, an append of JAX and numpy arrays
    that restarts the rows, and a new buffer: every stored timestep, seam and episode is the
    model's, the options are still the ones asked for, and nothing new makes no commit."""
    path = tmp_path / "v"
    chunk: dict[str, Any] = {"obs": [1, 4, 1], "done": [2, 3], "rew": [1, 5]}
    v = Vault.create(
        path,
        ring_state(0),
        codec="lz4",
        level=9,
        chunk=chunk,
        metadata={"run": "options", "seed": 3},
        **ROLES,
    )
    parts: list[dict[str, np.ndarray]] = []
    seams: list[Seam] = []

    assert v.write(ring_state(4), block=False) == 4
    parts.append(steps(0, 4))
    assert v.write(ring_state(9), block=False) == 5
    parts.append(steps(4, 9))
    v.flush()
    before = v.commit_id
    assert v.write(ring_state(9)) == 0
    assert v.write(ring_state(9), block=False) == 0
    v.flush()
    assert v.commit_id == before  # nothing new: no commit

    # 8 adds into a ring of 6: 2 unsaved timesteps were overwritten
    with pytest.raises(UnsavedDataLostError) as lost:
        v.write(ring_state(17), block=False)
    assert lost.value.lost == 2
    v.flush()
    assert (v.commit_id, v.committed_length) == (before, 9)  # refused: nothing written
    assert v.write(ring_state(17), on_overrun="save_surviving", block=False) == T
    seams.append(Seam(9, 2))
    parts.append(steps(11, 17))
    v.close()

    v = Vault.open(path, mode="a")
    assert v.write(ring_state(17)) == 0  # the reopened writer knows what was saved
    assert v.write(ring_state(17 + T), block=False) == T  # exactly a ring's worth
    parts.append(steps(17, 17 + T))
    v.flush()
    # arrays of another run, some leaves as JAX arrays: the rows restart
    block = steps(0, 3, salt=1)
    given = {k: (x if k == "big" else jnp.asarray(x)) for k, x in block.items()}
    assert v.append(given, continues=False) == 3
    seams.append(Seam(9 + 2 * T, 0))
    parts.append(block)
    # a buffer after appended arrays is another source: everything it holds, after a seam
    assert v.write(ring_state(4, salt=2), block=False) == 4
    seams.append(Seam(9 + 2 * T + 3, 0))
    parts.append(steps(0, 4, salt=2))
    v.close()

    want = joined(parts)
    r = assert_stored(path, want)
    assert r.seams == seams
    assert episodes_of(r.episodes()) == model_episodes(want, seams, (9 + 2 * T + 3,))
    assert r.metadata == {"run": "options", "seed": 3}
    for leaf in r.manifest.leaves:
        compressor = leaf.codecs[1]
        assert compressor["name"] == "blosc", leaf.name
        assert compressor["configuration"]["cname"] == "lz4", leaf.name
        assert compressor["configuration"]["clevel"] == 9, leaf.name
        if leaf.name in chunk:
            assert list(leaf.chunk) == chunk[leaf.name]


def test_zero_timestep_appends_restart_rows_and_change_no_data(tmp_path: Path) -> None:
    """An append of no timesteps returns 0 and stores nothing; with ``continues=False`` it
    still restarts the rows there (a seam; their open episodes dropped)."""
    path = tmp_path / "v"
    with Vault.create(path, example(), rows=ROWS, chunk={"act": [1, 3]}, **ROLES) as v:
        assert v.append(steps(0, 0)) == 0
        assert v.append(steps(0, 0), continues=False) == 0  # at 0: nothing to restart
        assert v.append(steps(0, 7)) == 7
        assert v.append(steps(7, 7), continues=False) == 0
        assert v.committed_length == 7
        assert v.append(steps(7, 12)) == 5
    want = steps(0, 12)
    r = assert_stored(path, want)
    assert r.seams == [Seam(7, 0)]
    assert episodes_of(r.episodes()) == model_episodes(want, r.seams)


def test_refusals_while_a_background_write_is_queued_are_typed_and_keep_it(
    tmp_path: Path,
) -> None:
    """Every refused call names the leaf or argument, is a VaultError and a ValueError, and
    leaves the vault as it was: the queued write is committed, nothing else, and the next
    write of the buffer appends exactly what is new."""
    path = tmp_path / "v"
    v = Vault.create(path, ring_state(0), chunk={"obs": [2, 4, 2]}, **ROLES)
    assert v.write(ring_state(3), block=False) == 3

    float64_obs = dict(steps(3, 5), obs=steps(3, 5)["obs"].astype(np.float64))
    jax_big = {k: jnp.asarray(x) for k, x in steps(3, 5).items()}  # int64 -> int32 (no x64)
    loose: Any = v  # arguments of the wrong type, on purpose
    cases: list[tuple[Any, type[VaultError], str]] = [
        (lambda: v.append(float64_obs), VaultStructureError, "experience/obs"),
        (lambda: v.append(jax_big), VaultStructureError, "experience/big"),
        (lambda: v.write(ring_state(5, rows=3)), VaultStructureError, "rows: expected 2, got 3"),
        (lambda: loose.write(ring_state(5), on_overrun="drop"), VaultArgumentError, "on_overrun"),
        (lambda: loose.write(ring_state(5), block=1), VaultArgumentError, "block"),
        (lambda: loose.write(ring_state(5), new_buffer=None), VaultArgumentError, "new_buffer"),
        (lambda: loose.append(steps(3, 5), continues="no"), VaultArgumentError, "continues"),
        (lambda: v.write(ring_state(1), block=False), VaultStructureError, "behind"),
    ]
    for call, error, named in cases:
        with pytest.raises(error, match=named) as raised:
            call()
        assert isinstance(raised.value, ValueError)
    v.flush()
    assert v.committed_length == 3
    assert v.write(ring_state(8), block=False) == 5
    v.close()
    want = steps(0, 8)
    r = assert_stored(path, want)
    assert r.seams == []
    assert episodes_of(r.episodes()) == model_episodes(want, [])


# ---------------------------------------------------------------- 2. another buffer, or not
def test_another_buffer_written_through_the_same_writer_is_refused_not_cut(
    tmp_path: Path,
) -> None:
    """The docs: a different buffer is refused with VaultStructureError and nothing is written
    (``new_buffer=True`` appends all it holds); a write never stores less than is new without
    raising. Here a second buffer (another run, a ring of another length) has had more adds
    than the first, and is written through the Vault object that wrote the first."""
    path = tmp_path / "v"
    v = Vault.create(path, ring_state(0))
    assert v.write(ring_state(3)) == 3
    other = ring_state(5, salt=1, time_len=2 * T)
    try:
        with pytest.raises(VaultStructureError, match="not the buffer"):
            v.write(other)  # today: 2 (its timesteps 3 and 4), its 0..2 never stored
        assert v.committed_length == 3
        assert v.write(other, new_buffer=True) == 5
    finally:
        v.close()
    assert_stored(path, joined([steps(0, 3), steps(0, 5, salt=1)]))


def test_new_buffer_on_every_write_still_reports_an_overrun_of_that_buffer(
    tmp_path: Path,
) -> None:
    """The docs: ``new_buffer=True`` is safe to pass on every write (for the buffer already
    being written it acts as without it); an overrun is UnsavedDataLostError with the count
    lost, and ``save_surviving`` records that count as a seam."""
    path = tmp_path / "v"
    with Vault.create(path, ring_state(0)) as v:
        assert v.write(ring_state(3), new_buffer=True) == 3
        late = ring_state(3 + T + 2)  # 2 unsaved timesteps overwritten
        with pytest.raises(UnsavedDataLostError) as lost:
            v.write(late, new_buffer=True)  # today: 6 stored, Seam(3, 5)
        assert lost.value.lost == 2
        assert v.write(late, new_buffer=True, on_overrun="save_surviving") == T
        assert v.seams == [Seam(3, 2)]
    assert_stored(path, joined([steps(0, 3), steps(5, 3 + T + 2)]))


@pytest.mark.parametrize("how", ["create", "reference"])
def test_a_flashbax_shaped_state_written_exactly_a_ring_later_is_never_silently_short(
    tmp_path: Path, how: str
) -> None:
    """The docs: write at least once every ``T`` adds (exactly ``T`` included); a state in
    Flashbax's shape has its counter derived, exact while fewer than ``T`` are added between
    writes, and otherwise the vault's check of its last timestep tells (never silently). So a
    write exactly a ring later, which a derived counter cannot tell from two rings later or
    from another buffer, is refused loudly, recording no loss."""
    time_len = 4

    def shaped(counter: int) -> Any:
        return fbx.to_flashbax_state(ring_state(counter, time_len=time_len))

    if how == "create":
        v = Vault.create(tmp_path / "v", ring_state(0, time_len=time_len))
        where = tmp_path / "v"
    else:
        v = Vault("run", ring_state(0, time_len=time_len), rel_dir=str(tmp_path), vault_uid="u")
        where = tmp_path / "run" / "u"
    try:
        assert v.write(shaped(2)) == 2
        assert v.write(shaped(2 + time_len)) == time_len  # past the first wrap: exact
        # where it was at the last write: a ring or more later, or another buffer. Refused,
        # loud (once: "create" wrote 0; "reference" recorded a loss, Seam(6, 2), of none)
        with pytest.raises(VaultStructureError, match="more often than every 4 adds"):
            v.write(shaped(2 + 2 * time_len))
        assert v.seams == []
        # its derived counter is a ring behind from now on: written as a new buffer, the
        # timestep it overwrote since (6) is a seam
        assert v.write(shaped(3 + 2 * time_len), new_buffer=True) == time_len
        assert [seam.at for seam in v.seams] == [6]
    finally:
        v.close()
    assert_stored(where, joined([steps(0, 6), steps(7, 3 + 2 * time_len)]))


# --------------------------------------------------------------------- 3. create and options
def test_a_state_of_no_rows_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    """``rows=0`` with an example is VaultArgumentError naming ``rows``; a state with no rows
    (built by hand, or a vmap over nothing) must be refused as typed, nothing created."""
    with pytest.raises(VaultArgumentError, match="rows"):
        Vault.create(tmp_path / "a", example(), rows=0)
    with pytest.raises(VaultError, match="rows"):
        Vault.create(tmp_path / "b", ring_state(0, rows=0))  # today: ZeroDivisionError
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


def test_the_reference_constructor_keeps_the_compressor_it_is_given(tmp_path: Path) -> None:
    """``compression`` is the reference's ``{"id": ..., ...}`` mapped to a codec: a blosc
    compressor keeps its ``cname`` and a level of 0 (no compression) stays 0."""
    state = ring_state(0)
    gzip = Vault("g", state, rel_dir=str(tmp_path), vault_uid="u", compression={"id": "gzip"})
    assert gzip.manifest.leaves[0].codecs[1]["name"] == "gzip"
    gzip.close()
    asked = {"id": "blosc", "cname": "lz4", "clevel": 0, "shuffle": 1}
    v = Vault("b", state, rel_dir=str(tmp_path), vault_uid="u", compression=asked)
    try:
        for leaf in v.manifest.leaves:
            compressor = leaf.codecs[1]
            assert compressor["name"] == "blosc", leaf.name
            # today: cname 'zstd', clevel 3
            assert compressor["configuration"]["cname"] == "lz4", leaf.name
            assert compressor["configuration"]["clevel"] == 0, leaf.name
        assert v.write(ring_state(3)) == 3
    finally:
        v.close()
    assert_stored(tmp_path / "b" / "u", steps(0, 3))


def test_the_reference_constructor_takes_a_flashbax_shaped_dict_as_create_does(
    tmp_path: Path,
) -> None:
    """A state in the reference's shape (what ``to_flashbax_state`` gives and orbax restores)
    is taken by ``Vault.create`` and ``write``; the reference-style constructor, documented
    to take "a buffer state's experience (or a state)", takes it too."""
    shaped = fbx.to_flashbax_state(ring_state(3))
    made = Vault.create(tmp_path / "made", shaped)
    assert made.write(shaped) == 3
    made.close()
    v = Vault("run", shaped, rel_dir=str(tmp_path), vault_uid="u")  # today: VaultStructureError
    try:
        assert v.rows == ROWS
        assert v.write(shaped) == 3
    finally:
        v.close()
    assert_stored(tmp_path / "run" / "u", steps(0, 3))


def test_a_first_leaf_without_row_and_time_axes_is_named(tmp_path: Path) -> None:
    """The conventions: a refusal names the leaf path. A bad leaf that comes later in leaf
    order is named (``experience/obs: leading axes ...``); the first one must be too."""
    with Vault.create(tmp_path / "v", example(), rows=ROWS) as v:
        later = dict(steps(0, 3), obs=np.zeros(ROWS, np.float32))
        with pytest.raises(VaultStructureError, match="experience/obs"):
            v.append(later)
        first = dict(steps(0, 3), act=np.zeros(ROWS, np.uint8))  # "act" is first in order
        with pytest.raises(VaultStructureError, match="experience/act"):
            v.append(first)  # today: "append() takes array leaves shaped ..., got shape (2,)"
        assert v.committed_length == 0


def test_verify_of_a_reward_leaf_with_infinities_is_clean_and_quiet(tmp_path: Path) -> None:
    """Rewards are the user's floats: an episode summing +inf and -inf has a NaN return.
    The index stores it; ``verify`` reports the healthy vault ok without stray warnings (the
    project's warnings come from ``warnings.warn``; numpy's are an error under ``-W error``)."""
    path = tmp_path / "v"
    data = steps(0, 10)
    data["rew"][0, 1], data["rew"][0, 2] = np.inf, -np.inf
    with Vault.create(path, example(), rows=ROWS, **ROLES) as v:
        v.append(data)
    returns = Vault.open(path).episodes().returns
    assert np.isnan(returns).sum() == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = vault.verify(path)
    assert report.ok, report.problems
    assert [str(w.message) for w in caught] == []
