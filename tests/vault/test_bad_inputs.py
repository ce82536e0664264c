"""Hostile input: every public function of ``vault`` refuses a bad argument with a typed error
that names it (issue 16).

One table, one row per kind of bad input: the call that triggers it on a tiny vault, the error
type and a fragment of the message. The rule for which type: an argument of the wrong type is
``VaultArgumentError`` (a ``TypeError`` too); a value of the right type out of range is the
caller's error (``VaultReadError`` for reads and streams, ``VaultArgumentError`` for creation
options), ``VaultStructureError`` for an experience that cannot be stored, ``VaultMetadataError``
for user metadata. After every refusal the vaults hold exactly what they held before, and a
refused ``Vault.create`` / derive leaves nothing at its destination.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import buffers as fbx
from vault import (
    Vault,
    VaultArgumentError,
    VaultExistsError,
    VaultLocationError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
    combine,
    derive_episodes,
    derive_slice,
    episode_stats,
    leaf_stats,
    time_blocks,
)

ROWS, T = 2, 8
EXAMPLE = {"obs": np.zeros(3, np.float32), "done": np.bool_(False), "reward": np.float32(0)}
PB = 10**15  # rows, timesteps or batches that would need petabytes


def _data(rows: int = ROWS, n: int = T) -> dict[str, np.ndarray]:
    obs = np.arange(rows * n * 3, dtype=np.float32).reshape(rows, n, 3)
    done = np.zeros((rows, n), bool)
    done[:, [2, 5]] = True  # two complete episodes per row
    return {"obs": obs, "done": done, "reward": np.ones((rows, n), np.float32)}


@dataclasses.dataclass
class Ctx:
    """The vaults every case runs against (built once for the module)."""

    root: Path
    path: Path  # the vault with an episode index: ROWS x T timesteps
    plain_path: Path  # one without (same data)
    reader: Vault  # ``path`` opened read-only
    plain: Vault  # ``plain_path`` opened read-only
    writer: Vault  # ``path`` opened for appending
    state: Any  # a buffer state shaped like the vault's experience
    target: Path = dataclasses.field(default_factory=Path)  # a fresh destination per case

    @property
    def r(self) -> Vault:
        return self.reader

    def create(self, structure: Any = None, **kw: Any) -> Vault:
        kw.setdefault("rows", ROWS)
        return Vault.create(self.target, EXAMPLE if structure is None else structure, **kw)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("bad-inputs")
    with Vault.create(root / "v", EXAMPLE, rows=ROWS, done_leaf="done", reward_leaf="reward") as v:
        v.append(_data())
    with Vault.create(root / "plain", EXAMPLE, rows=ROWS) as v:
        v.append(_data())
    buf = fbx.make_trajectory_buffer(ROWS, 1, 1, 1, 1, max_length_time_axis=4)
    state = buf.add(buf.init(EXAMPLE), jax.tree.map(lambda x: x[:, :2], _data()))
    writer = Vault.open(root / "v", "a")
    yield Ctx(
        root,
        root / "v",
        root / "plain",
        Vault.open(root / "v"),
        Vault.open(root / "plain"),
        writer,
        state,
    )
    writer.close()


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Ctx], Any]
    error: type[Exception]
    match: str
    prepare: Callable[[Ctx], Any] | None = None


def _nest(depth: int) -> dict[str, Any]:
    inner: dict[str, Any] = {}
    for _ in range(depth):
        inner = {"a": inner}
    return inner


def _self_containing() -> dict[str, Any]:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    return looped


def _max_pending(c: Ctx, value: Any) -> None:
    c.writer.max_pending = value


def _junk(c: Ctx) -> None:
    c.target.mkdir()
    (c.target / "notes.txt").write_text("not a vault")


def _open_episode(c: Ctx) -> Any:
    table = c.r.episodes(include_open=True)
    return table[np.flatnonzero(~table.complete)[:1]]


SHAPE_ONLY = jax.ShapeDtypeStruct  # a leaf with a shape and dtype but no memory behind it

CASES = [
    # ---------------------------------------------------------------- Vault.create: rows
    Case("create-rows-zero", lambda c: c.create(rows=0), VaultArgumentError,
         "rows must be an int >= 1, got 0"),
    Case("create-rows-negative", lambda c: c.create(rows=-3), VaultArgumentError,
         "rows must be an int >= 1, got -3"),
    Case("create-rows-float", lambda c: c.create(rows=2.5), VaultArgumentError,
         "rows must be an int >= 1, got 2.5 (a float)"),
    Case("create-rows-bool", lambda c: c.create(rows=True), VaultArgumentError,
         "rows must be an int >= 1, got True (a bool)"),
    Case("create-rows-huge", lambda c: c.create(rows=PB), VaultArgumentError,
         f"rows must be at most 16777216 (rows are parallel environments, and the commit "
         f"record keeps each one's open episode), got {PB}"),
    Case("create-rows-missing", lambda c: c.create(rows=None), VaultStructureError,
         "give `rows` when creating from a single timestep"),
    Case("create-rows-disagree-with-state", lambda c: c.create(c.state, rows=5),
         VaultArgumentError, "rows=5, but the buffer state has 2 rows: with a state the rows "
         "are taken from it; leave rows out"),
    # ---------------------------------------------------------------- Vault.create: structure
    Case("create-bare-array", lambda c: c.create(np.zeros(3)), VaultStructureError,
         "the experience is a bare ndarray, not a container of leaves: a vault stores a dict, "
         "tuple, list, NamedTuple or dataclass of arrays; wrap it, e.g. {'obs': x}"),
    Case("create-empty-pytree", lambda c: c.create({}), VaultStructureError,
         "the experience has no array leaves (its structure is"),
    Case("create-pytree-of-nothing", lambda c: c.create({"a": None, "b": (), "c": {}}),
         VaultStructureError, "the experience has no array leaves"),
    Case("create-zero-size-leaf", lambda c: c.create({"x": np.zeros((0, 3))}),
         VaultStructureError, "experience/x: shape [0, 3] has an empty axis, so a timestep "
         "would hold no value: drop the leaf or give it a non-empty shape"),
    Case("create-leaf-name-300-chars", lambda c: c.create({"a" * 300: np.zeros(2)}),
         VaultStructureError, "a node name of 300 bytes (escaped); a file name holds at "
         "most 255: use a shorter dict key"),
    Case("create-string-leaf", lambda c: c.create({"s": "abc"}), VaultStructureError,
         "cannot store a str at /s: use dicts, tuples, lists, NamedTuples or dataclasses"),
    Case("create-non-string-key", lambda c: c.create({1: np.zeros(2)}), VaultStructureError,
         "dict keys must be strings to be stored; at <root> got [1]"),
    Case("create-unsupported-dtype", lambda c: c.create({"z": np.zeros(2, np.complex64)}),
         VaultStructureError, "experience/z: dtype complex64 is not supported"),
    Case("create-state-leaves-disagree-on-rows",
         lambda c: c.create(dataclasses.replace(c.state, experience={
             "a": np.zeros((2, 4, 3), np.float32), "b": np.zeros((3, 4), np.float32)}),
             rows=None),
         VaultStructureError, "experience/b: leading axes [3, 4] differ from the first "
         "leaf's [2, 4]"),
    # ---------------------------------------------------------------- Vault.create: chunk
    Case("create-chunk-zero", lambda c: c.create(chunk={"obs": 0}), VaultArgumentError,
         "chunk['obs']: expected 3 ints >= 1 ([rows, time, 3] for experience/obs), got 0"),
    Case("create-chunk-wrong-rank", lambda c: c.create(chunk={"obs": [1, 2]}),
         VaultArgumentError, "chunk['obs']: expected 3 ints >= 1 ([rows, time, 3] for "
         "experience/obs), got [1, 2]"),
    Case("create-chunk-with-zeros", lambda c: c.create(chunk={"obs": [0, 8, 3]}),
         VaultArgumentError, "got [0, 8, 3]"),
    Case("create-chunk-float", lambda c: c.create(chunk={"obs": [1, 2.5, 3]}),
         VaultArgumentError, "got [1, 2.5, 3]"),
    Case("create-chunk-not-a-dict", lambda c: c.create(chunk=[1, 8, 3]), VaultArgumentError,
         "chunk must be a dict {leaf path: [rows, time, *item shape]}, got [1, 8, 3] (a list)"),
    Case("create-chunk-unknown-leaf", lambda c: c.create(chunk={"nope": [1, 1]}),
         VaultStructureError, "`chunk` names unknown leaves ['nope']"),
    Case("create-chunk-too-big", lambda c: c.create(chunk={"obs": [2, 10**9, 3]}),
         VaultArgumentError, "experience/obs: chunk['obs'] [2, 1000000000, 3] is 22.4 GiB, "
         "over 1.0 GiB (a chunk is encoded and decoded whole)"),
    Case("create-default-chunk-too-big",
         lambda c: c.create({"big": SHAPE_ONLY((1 << 16, 1 << 15), np.float32)}),
         VaultArgumentError, "experience/big: the default chunk [1, 1, 65536, 32768] is "
         "8.0 GiB, over 1.0 GiB"),
    # ---------------------------------------------------------------- Vault.create: codec
    Case("create-level-999", lambda c: c.create(codec="zstd", level=999), VaultArgumentError,
         "level must be in [-131072, 22] for codec 'zstd', got 999"),
    Case("create-level-gzip-10", lambda c: c.create(codec="gzip", level=10),
         VaultArgumentError, "level must be in [0, 9] for codec 'gzip', got 10"),
    Case("create-level-negative-blosc", lambda c: c.create(codec="blosc", level=-1),
         VaultArgumentError, "level must be an int >= 0, got -1"),
    Case("create-level-float", lambda c: c.create(codec="lz4", level=2.5),
         VaultArgumentError, "level must be an int >= 0, got 2.5 (a float)"),
    Case("create-level-without-codec", lambda c: c.create(codec=None, level=3),
         VaultArgumentError, "level=3 needs an explicit codec (with codec=None nothing is "
         "compressed)"),
    Case("create-level-with-auto-codec", lambda c: c.create(level=5), VaultArgumentError,
         "level=5 needs an explicit codec (with codec='auto' the codec and its level are "
         "chosen per leaf)"),
    Case("create-unknown-codec", lambda c: c.create(codec="ZSTD"), VaultArgumentError,
         "codec must be 'auto', None or one of ['blosc', 'gzip', 'lz4', 'zstd'], got 'ZSTD'"),
    Case("create-codec-not-a-string", lambda c: c.create(codec=["zstd"]), VaultArgumentError,
         "got ['zstd']"),
    # ---------------------------------------------------------------- Vault.create: metadata
    Case("create-metadata-int-key", lambda c: c.create(metadata={1: "one"}),
         VaultMetadataError, "metadata: key 1 (an int) is not a string (JSON would turn it "
         "into '1'): use a string key"),
    Case("create-metadata-nested-key", lambda c: c.create(metadata={"a": [{None: 1}]}),
         VaultMetadataError, "metadata['a'][0]: key None (a NoneType) is not a string"),
    Case("create-metadata-nan", lambda c: c.create(metadata={"x": float("nan")}),
         VaultMetadataError, "metadata['x']: nan is not a JSON number: use None or a string"),
    Case("create-metadata-tuple", lambda c: c.create(metadata={"t": (1, 2)}),
         VaultMetadataError, "metadata['t']: a tuple would come back as a list: give a list"),
    Case("create-metadata-numpy-scalar", lambda c: c.create(metadata={"n": np.int64(3)}),
         VaultMetadataError, "(an int64) is not JSON: convert it with .item() or .tolist()"),
    Case("create-metadata-object", lambda c: c.create(metadata={"o": object()}),
         VaultMetadataError, "(an object) is not JSON"),
    Case("create-metadata-contains-itself", lambda c: c.create(metadata=_self_containing()),
         VaultMetadataError, "nested more than 64 levels deep (or it contains itself)"),
    Case("create-metadata-too-deep", lambda c: c.create(metadata=_nest(100)),
         VaultMetadataError, "nested more than 64 levels deep"),
    Case("create-metadata-not-a-dict", lambda c: c.create(metadata=["a"]),
         VaultMetadataError, "metadata must be a dict, got list"),
    # ---------------------------------------------------------------- Vault.create: episodes
    Case("create-done-leaf-unknown", lambda c: c.create(done_leaf="nope"),
         VaultStructureError, "done_leaf 'nope': no such leaf"),
    Case("create-done-leaf-not-scalar", lambda c: c.create(done_leaf="obs"),
         VaultStructureError, "done_leaf 'obs': expected one value per timestep, got (3,)"),
    Case("create-truncated-without-done", lambda c: c.create(truncated_leaf="done"),
         VaultStructureError, "['truncated'] given without done_leaf: give done_leaf too"),
    # ---------------------------------------------------------------- Vault.create: location
    Case("create-into-non-empty-directory", lambda c: c.create(), VaultExistsError,
         "is not empty and holds no vault (it has notes.txt): create the vault in a new or "
         "empty directory", prepare=_junk),
    Case("create-onto-a-file", lambda c: c.create(), VaultExistsError,
         "is not empty and holds no vault (it is a file, not a directory)",
         prepare=lambda c: c.target.write_text("a file")),
    Case("create-over-a-vault", lambda c: Vault.create(c.path, EXAMPLE, rows=ROWS),
         VaultExistsError, "a Zarr node already exists at"),
    Case("create-location-not-a-path", lambda c: Vault.create(12, EXAMPLE, rows=ROWS),
         VaultLocationError, "a vault location is a path, a URL or a kvstore spec, got int"),
    Case("open-unknown-scheme", lambda c: Vault.open("gs://bucket/v"), VaultLocationError,
         "unsupported vault location scheme 'gs'"),
    Case("open-s3-bad-storage", lambda c: Vault.open("s3://bkt/v", storage={"retries": "3"}),
         VaultLocationError, "storage setting 'retries' must be a number"),
    Case("open-pin-float", lambda c: Vault.open(c.path, at=1.5), VaultArgumentError,
         "at must be a commit number, a commit id or a tag name, got float"),
    Case("open-bad-mode", lambda c: Vault.open(c.path, "w"), VaultArgumentError,
         "mode must be 'r' or 'a', got 'w'"),
    Case("open-nothing", lambda c: Vault.open(c.root / "absent"), VaultNotFoundError,
         "absent"),
    # ---------------------------------------------------------------- reads: rows
    Case("read-rows-float", lambda c: c.r.read_numpy(rows=[0.5]), VaultArgumentError,
         "rows must be a 1-D sequence of int row indices, got float64 values [0.5]"),
    Case("read-rows-bool", lambda c: c.r.read_numpy(rows=[True]), VaultArgumentError,
         "rows must be row indices, got booleans [True]; for a boolean mask write "
         "rows=np.flatnonzero(mask)"),
    Case("read-rows-boolean-mask",
         lambda c: c.r.read_numpy(rows=np.array([True, False])), VaultArgumentError,
         "rows must be row indices, got booleans [True, False]; for a boolean mask"),
    Case("read-rows-string", lambda c: c.r.read_numpy(rows="01"), VaultArgumentError,
         "rows must be a list of row indices, a slice or None, got '01' (a str)"),
    Case("read-rows-bare-int", lambda c: c.r.read_numpy(rows=1), VaultArgumentError,
         "got 1 (an int); for one row write rows=[i]"),
    Case("read-rows-2d", lambda c: c.r.read_numpy(rows=[[0, 1]]), VaultArgumentError,
         "rows must be a 1-D sequence of int row indices, got a 2-D array [0, 1]"),
    Case("read-rows-set", lambda c: c.r.read_numpy(rows={0, 1}), VaultArgumentError,
         "got {0, 1} (a set)"),
    Case("read-rows-out-of-range", lambda c: c.r.read_numpy(rows=[0, 5]), VaultReadError,
         "rows [5] out of range [0, 2)"),
    Case("read-rows-negative", lambda c: c.r.read_numpy(rows=[-1]), VaultReadError,
         "rows [-1] out of range [0, 2)"),
    Case("read-rows-slice-out-of-range", lambda c: c.r.read_numpy(rows=slice(5, 100)),
         VaultReadError, "rows slice(5, 100, None) reaches outside the vault's rows [0, 2) "
         "(start 5, stop 100); negative or larger bounds are not clamped"),
    Case("read-rows-slice-step-zero", lambda c: c.r.read_numpy(rows=slice(0, 2, 0)),
         VaultReadError, "rows slice(0, 2, 0): the step must not be 0"),
    Case("read-rows-slice-float", lambda c: c.r.read_numpy(rows=slice(0.5, 2)),
         VaultArgumentError, "rows slice start must be an int, got 0.5 (a float)"),
    # ---------------------------------------------------------------- reads: time
    Case("read-start-float", lambda c: c.r.read_numpy(start=2.7), VaultArgumentError,
         "start must be an int, got 2.7 (a float)"),
    Case("read-start-bool", lambda c: c.r.read_numpy(start=True), VaultArgumentError,
         "start must be an int, got True (a bool)"),
    Case("read-start-nan", lambda c: c.r.read_numpy(start=float("nan")), VaultArgumentError,
         "start must be an int, got nan (a float)"),
    Case("read-stop-string", lambda c: c.r.read(stop="5"), VaultArgumentError,
         "stop must be an int, got '5' (a str)"),
    Case("read-start-after-stop", lambda c: c.r.read_numpy(start=5, stop=2), VaultReadError,
         "start (5) must be <= stop (2)"),
    Case("read-stop-beyond-committed", lambda c: c.r.read_numpy(stop=99), VaultReadError,
         "time range [0, 99) is outside the committed [0, 8)"),
    Case("read-last-bool", lambda c: c.r.read_numpy(last=True), VaultArgumentError,
         "last must be an int, got True (a bool)"),
    Case("read-last-negative", lambda c: c.r.read(last=-1), VaultReadError,
         "last must be a non-negative int, got -1"),
    Case("read-last-beyond-committed", lambda c: c.r.read(last=9), VaultReadError,
         "asked for the last 9 timesteps but only 8 are committed"),
    Case("read-timesteps-bool", lambda c: c.r.read(True), VaultArgumentError,
         "timesteps must be an int, got True (a bool)"),
    Case("read-timesteps-and-last", lambda c: c.r.read(3, last=3), VaultReadError,
         "give last or timesteps (the same thing), not both"),
    Case("read-two-ways-to-choose-time", lambda c: c.r.read_numpy(start=1, last=2),
         VaultReadError, "give at most one of start/stop, last and percentiles"),
    Case("read-percentiles-nan", lambda c: c.r.read(percentiles=(float("nan"), 50)),
         VaultReadError, "percentiles must satisfy 0 <= a <= b <= 100, got (nan, 50.0)"),
    Case("read-percentiles-string", lambda c: c.r.read(percentiles="ab"), VaultReadError,
         "percentiles must be a pair (a, b), got 'ab'"),
    # ---------------------------------------------------------------- reads: capacity, leaves
    Case("read-capacity-zero", lambda c: c.r.read(capacity=0), VaultReadError,
         "capacity must be >= 1, got 0"),
    Case("read-capacity-float", lambda c: c.r.read(capacity=2.5), VaultArgumentError,
         "capacity must be an int, got 2.5 (a float)"),
    Case("read-capacity-petabytes", lambda c: c.r.read(capacity=PB), VaultReadError,
         f"a state of capacity {PB} would allocate 30.2 PiB (34000000000000000 bytes), more "
         "than this machine's memory"),
    Case("read-leaves-string", lambda c: c.r.read_numpy(leaves="obs"), VaultArgumentError,
         "leaves must be a list of leaf paths, got the string 'obs'; write leaves=['obs']"),
    Case("read-leaves-empty", lambda c: c.r.read_numpy(leaves=[]), VaultReadError,
         "leaves=[] selects no leaf; name at least one of ['done', 'obs', 'reward'], or pass "
         "None for every leaf"),
    Case("read-leaves-unknown", lambda c: c.r.read_numpy(leaves=["nope"]), VaultReadError,
         "unknown leaves ['nope']; the vault has ['done', 'obs', 'reward']"),
    Case("read-leaves-with-group-prefix", lambda c: c.r.read(leaves=["experience/obs"]),
         VaultReadError, "(leaf paths do not start with 'experience/': write 'obs')"),
    Case("read-leaves-twice", lambda c: c.r.read_numpy(leaves=["obs", "obs"]),
         VaultReadError, "leaves ['obs', 'obs'] name a leaf twice"),
    Case("read-leaves-not-strings", lambda c: c.r.read_numpy(leaves=[0]), VaultArgumentError,
         "leaves must be leaf paths (strings), got [0]"),
    # ---------------------------------------------------------------- episodes
    Case("episode-position-float", lambda c: c.r.read_episode(1.5), VaultArgumentError,
         "episode must be an int, got 1.5 (a float)"),
    Case("episode-position-bool", lambda c: c.r.read_episode(True), VaultArgumentError,
         "episode must be an int, got True (a bool)"),
    Case("episode-position-string", lambda c: c.r.read_episode("1"), VaultArgumentError,
         "episode must be an int, got '1' (a str)"),
    Case("episode-out-of-range", lambda c: c.r.read_episode(99), VaultReadError,
         "episode 99 out of range; 4 complete episodes are committed"),
    Case("episode-table-of-two", lambda c: c.r.read_episode(c.r.episodes()[[0, 1]]),
         VaultReadError, "read_episode takes one episode, got 2"),
    Case("episode-leaves-string", lambda c: c.r.read_episode(0, leaves="obs"),
         VaultArgumentError, "leaves must be a list of leaf paths, got the string 'obs'"),
    Case("episodes-without-index", lambda c: c.plain.episodes(), VaultReadError,
         "has no episode index: create the vault with done_leaf=..."),
    Case("episodes-include-open-string", lambda c: c.r.episodes(include_open="yes"),
         VaultArgumentError, "include_open must be True or False, got 'yes' (a str)"),
    Case("iter-episodes-not-a-table", lambda c: c.r.iter_episodes([0]), VaultArgumentError,
         "iter_episodes takes an EpisodeTable (from vault.episodes()), got [0] (a list)"),
    Case("table-sort-unknown-key", lambda c: c.r.episodes().sort("nope"), VaultArgumentError,
         "sort by one of ['length', 'return', 'row', 'start'], got 'nope'"),
    Case("table-select-top-k-negative", lambda c: c.r.episodes().select(top_k=-1),
         VaultArgumentError, "top_k must be an int >= 0, got -1"),
    Case("table-select-top-k-float", lambda c: c.r.episodes().select(top_k=1.5),
         VaultArgumentError, "top_k must be an int >= 0, got 1.5 (a float)"),
    Case("table-select-transitions-negative",
         lambda c: c.r.episodes().select(transitions=-5), VaultArgumentError,
         "transitions must be an int >= 0, got -5"),
    Case("table-select-min-return-nan",
         lambda c: c.r.episodes().select(min_return=float("nan")), VaultArgumentError,
         "min_return must be a finite number, got nan: a NaN bound selects nothing"),
    Case("table-select-seed-negative", lambda c: c.r.episodes().select(seed=-1),
         VaultArgumentError, "seed must be an int >= 0, got -1"),
    # ---------------------------------------------------------------- as_dataset
    Case("stream-batch-zero", lambda c: c.r.as_dataset(0, 2), VaultReadError,
         "sample_batch_size must be an int >= 1, got 0"),
    Case("stream-batch-float", lambda c: c.r.as_dataset(2.5, 2), VaultArgumentError,
         "sample_batch_size must be an int >= 1, got 2.5 (a float)"),
    Case("stream-batch-petabytes", lambda c: c.r.as_dataset(PB, 2), VaultReadError,
         f"as_dataset(sample_batch_size={PB}, sequence_length=2, prefetch=2, interleave=1) "
         "would allocate"),
    Case("stream-sequence-zero", lambda c: c.r.as_dataset(2, 0), VaultReadError,
         "sequence_length must be an int >= 1, got 0"),
    Case("stream-sequence-longer-than-data", lambda c: c.r.as_dataset(2, 9), VaultReadError,
         "sequences of 9 timesteps need at least 9 committed timesteps per row; the vault "
         "has 8"),
    Case("stream-stride-zero", lambda c: c.r.as_dataset(2, 2, stride=0), VaultReadError,
         "stride must be an int >= 1, got 0"),
    Case("stream-seed-negative", lambda c: c.r.as_dataset(2, 2, seed=-1), VaultReadError,
         "seed must be an int >= 0, got -1"),
    Case("stream-seed-float", lambda c: c.r.as_dataset(2, 2, seed=0.5), VaultArgumentError,
         "seed must be an int >= 0, got 0.5 (a float)"),
    Case("stream-prefetch-negative", lambda c: c.r.as_dataset(2, 2, prefetch=-1),
         VaultReadError, "prefetch must be an int >= 0, got -1"),
    Case("stream-prefetch-petabytes",
         lambda c: c.r.as_dataset(2, 2, prefetch=PB, epochs=None), VaultReadError,
         f"as_dataset(sample_batch_size=2, sequence_length=2, prefetch={PB}, interleave=1) "
         "would allocate"),
    Case("stream-interleave-zero", lambda c: c.r.as_dataset(2, 2, interleave=0),
         VaultReadError, "interleave must be an int >= 1, got 0"),
    Case("stream-epochs-negative", lambda c: c.r.as_dataset(2, 2, epochs=-1), VaultReadError,
         "epochs must be an int >= 0, got -1"),
    Case("stream-block-below-sequence", lambda c: c.r.as_dataset(2, 4, block_timesteps=3),
         VaultReadError, "block_timesteps (3) must be >= sequence_length (4)"),
    Case("stream-block-rows-zero", lambda c: c.r.as_dataset(2, 2, block_rows=0),
         VaultReadError, "block_rows must be an int >= 1, got 0"),
    Case("stream-run-blocks-zero", lambda c: c.r.as_dataset(2, 2, run_blocks=0),
         VaultReadError, "run_blocks must be an int >= 1, got 0"),
    Case("stream-shuffle-string", lambda c: c.r.as_dataset(2, 2, shuffle="no"),
         VaultArgumentError, "shuffle must be True or False, got 'no' (a str)"),
    Case("stream-drop-remainder-int", lambda c: c.r.as_dataset(2, 2, drop_remainder=1),
         VaultArgumentError, "drop_remainder must be True or False, got 1 (an int)"),
    Case("stream-device-put-string", lambda c: c.r.as_dataset(2, 2, device_put="cpu"),
         VaultArgumentError, "device_put must be True or False, got 'cpu' (a str)"),
    Case("stream-episode-aware-without-index",
         lambda c: c.plain.as_dataset(2, 2, episode_aware=True), VaultReadError,
         "episode_aware=True needs a vault that knows its episode ends"),
    Case("stream-rows-twice", lambda c: c.r.as_dataset(2, 2, rows=[1, 1]), VaultReadError,
         "rows [1, 1] name a row twice"),
    Case("stream-rows-empty", lambda c: c.r.as_dataset(2, 2, rows=[]), VaultReadError,
         "the row selection [] is empty"),
    Case("stream-leaves-empty", lambda c: c.r.as_dataset(2, 2, leaves=[]), VaultReadError,
         "leaves=[] selects no leaf"),
    Case("stream-unknown-option", lambda c: c.r.as_dataset(2, 2, suffle=False),
         VaultArgumentError, "as_dataset: unknown option 'suffle' (did you mean 'shuffle'?)"),
    Case("stream-no-batch-forever",
         lambda c: next(c.r.as_dataset(100, 8, epochs=None, prefetch=0)), VaultReadError,
         "an epoch yields no batch of 100 (too few valid sequences of 8 timesteps); "
         "repeating forever would never yield one"),
    # ---------------------------------------------------------------- iter_windows
    Case("windows-window-zero", lambda c: c.r.iter_windows(0), VaultReadError,
         "window must be an int >= 1, got 0"),
    Case("windows-capacity-below-window", lambda c: c.r.iter_windows(4, capacity=3),
         VaultReadError, "capacity (3) must be >= window (4)"),
    Case("windows-capacity-float", lambda c: c.r.iter_windows(4, capacity=4.5),
         VaultArgumentError, "capacity must be an int >= 1, got 4.5 (a float)"),
    Case("windows-capacity-petabytes", lambda c: c.r.iter_windows(4, capacity=PB),
         VaultReadError, f"iter_windows(window=4, capacity={PB}, prefetch=1) would allocate"),
    Case("windows-window-petabytes", lambda c: c.r.iter_windows(PB), VaultReadError,
         f"iter_windows(window={PB}, capacity={PB}, prefetch=1) would allocate"),
    Case("windows-prefetch-negative", lambda c: c.r.iter_windows(4, prefetch=-1),
         VaultReadError, "prefetch must be an int >= 0, got -1"),
    Case("windows-none-left", lambda c: c.r.iter_windows(9, drop_remainder=True),
         VaultReadError, "no window of 9 timesteps: 8 committed"),
    Case("windows-shuffle-string", lambda c: c.r.iter_windows(4, shuffle="yes"),
         VaultArgumentError, "shuffle must be True or False, got 'yes' (a str)"),
    Case("windows-epoch-negative", lambda c: c.r.iter_windows(4, prefetch=0).ranges(-1),
         VaultReadError, "epoch must be an int >= 0, got -1"),
    Case("windows-unknown-option", lambda c: c.r.iter_windows(4, windw=2),
         VaultArgumentError, "iter_windows: unknown option 'windw'"),
    # ---------------------------------------------------------------- statistics
    Case("stats-not-a-vault", lambda c: leaf_stats(str(c.path)), VaultArgumentError,
         "leaf_stats takes an open Vault or Dataset, got"),
    Case("stats-leaves-string", lambda c: leaf_stats(c.r, leaves="obs"), VaultArgumentError,
         "leaves must be a list of leaf paths, got the string 'obs'"),
    Case("stats-unknown-leaf", lambda c: leaf_stats(c.r, leaves=["nope"]), VaultReadError,
         "unknown leaves ['nope']"),
    Case("stats-block-bytes-zero", lambda c: leaf_stats(c.r, block_bytes=0), VaultReadError,
         "block_bytes must be an int >= 1, got 0"),
    Case("stats-progress-not-callable", lambda c: leaf_stats(c.r, progress=5),
         VaultArgumentError, "progress must be a function or None, got 5 (an int)"),
    Case("episode-stats-not-a-table", lambda c: episode_stats([1]), VaultArgumentError,
         "episode_stats takes an EpisodeTable (from vault.episodes()), got [1] (a list)"),
    Case("time-blocks-zero-chunk", lambda c: time_blocks(8, 0, 4, 64), VaultArgumentError,
         "chunk_time must be an int >= 1, got 0"),
    # ---------------------------------------------------------------- writes
    Case("write-max-pending-zero", lambda c: _max_pending(c, 0), VaultArgumentError,
         "max_pending must be an int >= 1, got 0"),
    Case("write-max-pending-float", lambda c: _max_pending(c, 1.5), VaultArgumentError,
         "max_pending must be an int >= 1, got 1.5 (a float)"),
    Case("write-not-a-state", lambda c: c.writer.write({"obs": 1}), VaultStructureError,
         "write() takes a buffer state from `buffers`"),
    Case("write-read-only", lambda c: c.r.write(c.state), VaultModeError,
         "is open read-only; open it with mode='a'"),
    Case("append-bare-array", lambda c: c.writer.append(np.zeros((2, 1, 3))),
         VaultStructureError, "the state's structure differs from the vault's; nothing "
         "written"),
    Case("append-empty", lambda c: c.writer.append({}), VaultStructureError,
         "the experience has no array leaves"),
    Case("append-missing-leaf",
         lambda c: c.writer.append({k: v for k, v in _data().items() if k != "reward"}),
         VaultStructureError, "experience/reward: missing from the state"),
    Case("append-wrong-rows", lambda c: c.writer.append(_data(rows=3)),
         VaultStructureError, "rows: expected 2, got 3"),
    Case("append-wrong-dtype",
         lambda c: c.writer.append({**_data(), "obs": _data()["obs"].astype(np.float64)}),
         VaultStructureError, "experience/obs: expected [2, T, 3] float32, got [2, T, 3] "
         "float64"),
    Case("append-no-time-axis", lambda c: c.writer.append(jax.tree.map(lambda x: x[0, 0],
         _data())), VaultStructureError, "append() takes array leaves shaped [rows, time, ...]"),
    # ---------------------------------------------------------------- derive
    Case("derive-rows-empty", lambda c: derive_slice(c.path, c.target, rows=[]),
         VaultReadError, "rows selects no row"),
    Case("derive-rows-out-of-range", lambda c: derive_slice(c.path, c.target, rows=[7]),
         VaultReadError, "rows [7] out of range [0, 2)"),
    Case("derive-start-float", lambda c: derive_slice(c.path, c.target, start=2.7),
         VaultArgumentError, "start must be an int, got 2.7 (a float)"),
    Case("derive-start-after-stop", lambda c: derive_slice(c.path, c.target, start=5, stop=2),
         VaultReadError, "start (5) must be <= stop (2)"),
    Case("derive-unknown-codec", lambda c: derive_slice(c.path, c.target, codec="zip"),
         VaultArgumentError, "codec must be 'auto', None or one of"),
    Case("derive-onto-a-vault", lambda c: derive_slice(c.path, c.plain_path),
         VaultExistsError, "already exists; choose a new destination"),
    Case("derive-episodes-not-a-table", lambda c: derive_episodes(c.path, c.target, [0]),
         VaultArgumentError, "episodes must be an EpisodeTable, got list"),
    Case("derive-episodes-open-one",
         lambda c: derive_episodes(c.path, c.target, _open_episode(c)), VaultReadError,
         "derive_episodes takes complete episodes (an open one was given)"),
    Case("combine-nothing", lambda c: combine([], c.target), VaultReadError,
         "combine needs at least one source"),
    Case("combine-different-vaults", lambda c: combine([c.path, c.plain_path], c.target),
         VaultStructureError, "the vaults to combine differ"),
    Case("append-leaf-without-shape", lambda c: c.writer.append([1, 2]), VaultStructureError,
         "shape"),
    Case("derive-rows-float", lambda c: derive_slice(c.path, c.target, rows=[0.5]),
         VaultArgumentError, "rows must be a 1-D sequence of int row indices"),
    Case("derive-rows-slice-out-of-range",
         lambda c: derive_slice(c.path, c.target, rows=slice(5, 100)), VaultReadError, "rows"),
    Case("derive-progress-not-callable", lambda c: derive_slice(c.path, c.target, progress=5),
         VaultArgumentError, "progress must be a function or None"),
    Case("combine-a-string", lambda c: combine(str(c.path), c.target), VaultArgumentError,
         "sources"),
]  # fmt: skip


# Bad inputs still accepted (or untyped) because the fix belongs to a module outside this
# change; each says where. Move a case into CASES once it passes (these report XPASS).
PENDING: list[Case] = [
]  # fmt: skip


def _contents(path: Path) -> Any:
    if path.is_file():
        return path.read_text()
    return sorted(p.name for p in path.iterdir()) if path.exists() else None


def _call(case: Case, ctx: Ctx) -> None:
    result = case.call(ctx)
    if hasattr(result, "close"):  # a case that failed to fail: stop the stream it started
        result.close()


def test_the_catalogue_is_long_and_its_ids_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 45


@pytest.mark.parametrize(
    "case",
    [
        *CASES,
        *(
            pytest.param(case, marks=pytest.mark.xfail(reason="pending: see PENDING"))
            for case in PENDING
        ),
    ],
    ids=[case.id for case in [*CASES, *PENDING]],
)
def test_bad_input_is_refused_with_a_typed_error(ctx: Ctx, case: Case) -> None:
    ctx.target = ctx.root / f"new-{case.id}"
    if case.prepare is not None:
        case.prepare(ctx)
    before = _contents(ctx.target)
    stored = {name: ctx.reader.read_numpy(leaves=[name])[name] for name in ctx.reader.leaf_names}
    with pytest.raises(case.error, match=re.escape(case.match)):
        _call(case, ctx)
    # Nothing was stored: no vault (or partial vault) at the destination, the vaults as before.
    assert _contents(ctx.target) == before
    for path in (ctx.path, ctx.plain_path):
        again = Vault.open(path)
        assert again.committed_length == T
        for name, value in stored.items():
            np.testing.assert_array_equal(again.read_numpy(leaves=[name])[name], value)
    assert len(Vault.open(ctx.path).episodes()) == 4
    assert ctx.writer.max_pending == 2
    assert ctx.writer.committed_length == T


def test_the_type_errors_are_type_errors_too(ctx: Ctx) -> None:
    with pytest.raises(TypeError):
        ctx.reader.read_numpy(start=2.7)
    with pytest.raises(ValueError, match=re.escape("rows [5] out of range")):
        ctx.reader.read_numpy(rows=[5])


def test_names_the_store_uses_itself_are_escaped_not_refused(tmp_path: Path) -> None:
    """``..``, ``/``, ``""`` and the store's own names are safe node names once escaped
    (``escape`` is injective), so such dict keys are stored and read back as given."""
    keys = ["", ".", "..", "a/b", "zarr.json", "ZARR.JSON", "zarr.json.__lock", "x.__lock"]
    example = {key: np.int8(i) for i, key in enumerate(keys)}
    with Vault.create(tmp_path / "v", example, rows=1) as vault:
        names = vault.leaf_names
        assert len(set(names)) == len(keys)
        assert not {"zarr.json", "ZARR.JSON", "zarr.json.__lock", "x.__lock"} & set(names)
        vault.append({key: np.full((1, 2), i, np.int8) for i, key in enumerate(keys)})
    back = Vault.open(tmp_path / "v").read_numpy()
    assert sorted(back) == sorted(keys)
    for i, key in enumerate(keys):
        np.testing.assert_array_equal(back[key], np.full((1, 2), i, np.int8))


def test_good_inputs_next_to_the_bad_ones_still_work(ctx: Ctx) -> None:
    """The checks refuse only what is wrong: numpy integers, integer arrays, negative-step
    and empty slices, generators of rows and an explicit level with a codec all work."""
    r = ctx.reader
    obs = r.read_numpy()["obs"]
    np.testing.assert_array_equal(r.read_numpy(rows=np.array([1, 0]))["obs"], obs[[1, 0]])
    np.testing.assert_array_equal(r.read_numpy(rows=slice(None, None, -1))["obs"], obs[::-1])
    np.testing.assert_array_equal(r.read_numpy(rows=slice(0, 2, 2))["obs"], obs[0:2:2])
    assert r.read_numpy(rows=slice(1, 1))["obs"].shape == (0, T, 3)
    np.testing.assert_array_equal(r.read_numpy(rows=(i for i in [1]))["obs"], obs[[1]])
    np.testing.assert_array_equal(
        r.read_numpy(start=np.int64(2), stop=np.int32(5))["obs"], obs[:, 2:5]
    )
    assert r.read(last=np.int64(3), capacity=np.int64(4)).experience["obs"].shape == (2, 4, 3)
    assert len(r.read_episode(np.int64(1))["obs"]) == 3
    assert len(r.episodes().select(top_k=np.int64(1), min_return=np.float32(0))) == 1
    stream = r.as_dataset(np.int64(2), 2, shuffle=np.bool_(False), device_put=False)
    assert next(stream).experience["obs"].shape == (2, 2, 3)
    stream.close()
    chunk = {"obs": np.array([2, 4, 3])}  # numpy ints are stored as JSON ints
    with Vault.create(ctx.root / "good", EXAMPLE, rows=np.int64(2), chunk=chunk, codec="gzip",
                      level=np.int64(9)) as vault:  # fmt: skip
        assert vault.manifest.leaf("obs").chunk == (2, 4, 3)
    assert Vault.open(ctx.root / "good").rows == ROWS
