"""The episode index (shared/DESIGN.md, Vault invariant 9).

When a vault is created with ``done_leaf`` (and optionally ``truncated_leaf`` and
``reward_leaf``), every append also extends an index of the episodes that ended in it. An
episode of row ``r`` ends at time ``t`` when ``done[r, t]`` or ``truncated[r, t]`` is true; the
next episode of that row starts at ``t + 1``. The index is stored in two Zarr arrays,
``episodes/bounds`` (int64 ``[N, 4]``: row, start, length, flags) and ``episodes/returns``
(float64 ``[N]``), and committed with the data: the commit record holds the number of indexed
episodes and, per row, the still-open episode (its start, return so far and flags), so an
episode spanning any number of writes is exact and readers never see a half-written index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from vault._args import bool_arg, finite_arg, int_arg
from vault._errors import VaultArgumentError
from vault.format._records import CHUNK_KEYS, INDEX_CHUNK, OpenEpisodes

BOUNDS_FIELDS = ["row", "start", "length", "flags"]
FLAG_TRUNCATED = 1  # the episode ended by truncation (time limit), not termination
FLAG_START_UNKNOWN = 2  # begins right after a recorded gap or at a slice start mid-episode


@dataclasses.dataclass(frozen=True)
class EpisodeTable:
    """Episodes as numpy columns of equal length (one entry per episode).

    Indexing with an int, a slice, a mask or indices gives a table of those episodes;
    iterating gives :meth:`to_records`'s dicts.

    Attributes:
        row: each episode's row.
        start: its first timestep (a time index in the vault).
        length: its timesteps.
        returns: the sum of the reward leaf over it (NaN when the vault has no reward leaf).
        truncated: whether a complete episode ended by truncation.
        complete: false for the open (unfinished) last episode of a row (included only with
            ``vault.episodes(include_open=True)``).
        start_known: false for an episode whose beginning was lost (it starts at a seam).
        shard: the shard of a :class:`~vault.Dataset` each episode is in (None for a single
            vault's table).
    """

    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    returns: np.ndarray
    truncated: np.ndarray
    complete: np.ndarray
    start_known: np.ndarray
    shard: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = None
        for f in dataclasses.fields(self):
            column = getattr(self, f.name)
            if column is None and f.name == "shard":
                continue
            shape = getattr(column, "shape", None)
            if not isinstance(column, np.ndarray) or len(shape or ()) != 1:
                raise VaultArgumentError(
                    f"EpisodeTable: column {f.name!r} must be a 1-D numpy array, got "
                    + (f"shape {shape}" if shape is not None else type(column).__name__)
                )
            n = column.shape[0] if n is None else n
            if column.shape[0] != n:
                raise VaultArgumentError(
                    f"EpisodeTable: columns of equal length, one entry per episode: 'row' has "
                    f"{n}, {f.name!r} {column.shape[0]}"
                )

    def __len__(self) -> int:
        return int(self.row.shape[0])

    def __getitem__(self, index: Any) -> EpisodeTable:
        if isinstance(index, str) or index is None or isinstance(index, (float, dict)):
            raise VaultArgumentError(
                "an EpisodeTable is indexed by an int, a slice, a boolean mask or indices, got "
                f"{index!r}; its columns are attributes: "
                + ", ".join(f"table.{f.name}" for f in _FIELDS)
            )
        if isinstance(index, (int, np.integer)):
            index = [int(index)]
        columns: dict[str, Any] = {f.name: _pick(getattr(self, f.name), index) for f in _FIELDS}
        return EpisodeTable(**columns)

    def __iter__(self) -> Any:
        return iter(self.to_records())

    @property
    def transitions(self) -> int:
        """Total number of timesteps in these episodes."""
        return int(self.length.sum())

    def to_records(self) -> list[dict[str, Any]]:
        """Returns one JSON-ready dict per episode (a missing return is ``None``)."""
        return [
            {
                **({} if self.shard is None else {"shard": str(self.shard[i])}),
                "row": int(self.row[i]),
                "start": int(self.start[i]),
                "length": int(self.length[i]),
                "return": None if np.isnan(self.returns[i]) else float(self.returns[i]),
                "truncated": bool(self.truncated[i]),
                "complete": bool(self.complete[i]),
                "start_known": bool(self.start_known[i]),
            }
            for i in range(len(self))
        ]

    def sort(self, by: str = "return", descending: bool = True) -> EpisodeTable:
        """The episodes sorted by one column (a stable sort; NaN last).

        Args:
            by: ``"return"``, ``"length"``, ``"row"`` or ``"start"``.
            descending: largest first.

        Returns:
            A new table.

        Raises:
            VaultArgumentError: another column, or ``descending`` not True or False.
        """
        descending = bool_arg("descending", descending)
        columns = {"return": self.returns, "length": self.length, "row": self.row}
        columns["start"] = self.start
        if not isinstance(by, str) or by not in columns:
            raise VaultArgumentError(f"sort by one of {sorted(columns)}, got {by!r}")
        key = columns[by].astype(np.float64)
        key = np.where(np.isnan(key), -np.inf if descending else np.inf, key)
        order = np.argsort(-key if descending else key, kind="stable")
        return self[order]

    def select(
        self,
        *,
        min_return: float | None = None,
        max_return: float | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        top_k: int | None = None,
        transitions: int | None = None,
        seed: int = 0,
    ) -> EpisodeTable:
        """Complete episodes with a known start that pass every given filter, in index order.

        Args:
            min_return: keep returns at least this.
            max_return: keep returns at most this.
            min_length: keep lengths at least this.
            max_length: keep lengths at most this.
            top_k: then keep the ``top_k`` highest returns.
            transitions: then draw episodes uniformly at random (seeded) until their lengths
                add up to at least that many timesteps (or every episode is taken).
            seed: the seed of that draw.

        Returns:
            A new table.

        Raises:
            VaultArgumentError: a return bound that is not a finite number, a length bound
                that is not an int >= 0, or a count below 0.

        Examples:
            >>> import numpy as np
            >>> from vault import EpisodeTable
            >>> bounds = np.array([[0, 0, 3, 0], [0, 3, 5, 0], [1, 0, 2, 0]])
            >>> table = EpisodeTable.from_bounds(bounds, np.array([1.0, 4.0, 2.0]), True)
            >>> table.select(min_length=3).returns.tolist()
            [1.0, 4.0]
            >>> table.select(top_k=1).start.tolist()
            [3]
        """
        keep = self.complete & self.start_known
        bounds = {
            "min_return": min_return,
            "max_return": max_return,
            "min_length": min_length,
            "max_length": max_length,
        }
        limit = {
            k: int_arg(k, v, 0) if k.endswith("_length") else finite_arg(k, v)
            for k, v in bounds.items()
            if v is not None
        }
        if top_k is not None:
            top_k = int_arg("top_k", top_k, 0)
        if transitions is not None:
            transitions = int_arg("transitions", transitions, 0)
        seed = int_arg("seed", seed, 0)
        if "min_return" in limit:
            keep &= self.returns >= limit["min_return"]
        if "max_return" in limit:
            keep &= self.returns <= limit["max_return"]
        if "min_length" in limit:
            keep &= self.length >= limit["min_length"]
        if "max_length" in limit:
            keep &= self.length <= limit["max_length"]
        picked = np.flatnonzero(keep)
        if top_k is not None:
            order = np.argsort(-np.nan_to_num(self.returns[picked], nan=-np.inf), kind="stable")
            picked = np.sort(picked[order[:top_k]])
        if transitions is not None:
            shuffled = np.random.default_rng(seed).permutation(picked)
            total = np.cumsum(self.length[shuffled])
            count = int(np.searchsorted(total, transitions)) + 1 if transitions else 0
            picked = np.sort(shuffled[:count])
        return self[picked]

    @classmethod
    def empty(cls) -> EpisodeTable:
        """Returns a table of no episodes."""
        return cls.from_bounds(np.zeros((0, 4), np.int64), np.zeros(0), has_reward=True)

    @classmethod
    def from_bounds(
        cls,
        bounds: np.ndarray,
        returns: np.ndarray,
        has_reward: bool,
        complete: np.ndarray | None = None,
    ) -> EpisodeTable:
        """A table from the episode index's stored columns.

        Args:
            bounds: ``[k, 4]`` ints per episode: row, start, length, flags (bit 0: truncated,
                bit 1: start unknown).
            returns: ``[k]`` returns.
            has_reward: whether the returns mean anything (else they are NaN).
            complete: ``[k]`` bools (default: every episode is complete).

        Returns:
            The table.
        """
        bounds, returns = np.asarray(bounds), np.asarray(returns)
        if bounds.ndim != 2 or bounds.shape[1] != 4:
            raise VaultArgumentError(
                f"from_bounds: bounds must be [k, 4] (row, start, length, flags), got shape "
                f"{bounds.shape}"
            )
        n = bounds.shape[0]
        if returns.shape != (n,):
            raise VaultArgumentError(
                f"from_bounds: returns must be [k] with k = {n} (one per bound), got shape "
                f"{returns.shape}"
            )
        flags = bounds[:, 3]
        return cls(
            row=bounds[:, 0].astype(np.int64),
            start=bounds[:, 1].astype(np.int64),
            length=bounds[:, 2].astype(np.int64),
            returns=returns.astype(np.float64) if has_reward else np.full(n, np.nan),
            truncated=(flags & FLAG_TRUNCATED) != 0,
            complete=np.ones(n, bool) if complete is None else complete,
            start_known=(flags & FLAG_START_UNKNOWN) == 0,
        )

    @classmethod
    def concat(cls, tables: Sequence[EpisodeTable]) -> EpisodeTable:
        """Returns one table of several, in order.

        Args:
            tables: the tables (a shard column only when every one has it).
        """
        if isinstance(tables, EpisodeTable) or not isinstance(tables, (list, tuple)):
            raise VaultArgumentError(
                "concat: tables must be a list or tuple of EpisodeTable, got "
                f"{type(tables).__name__}"
            )
        tables = list(tables)
        for t in tables:
            if not isinstance(t, EpisodeTable):
                raise VaultArgumentError(
                    f"concat: tables must be EpisodeTable items, got {type(t).__name__}"
                )
        columns: dict[str, Any] = {}
        for f in _FIELDS:
            parts = [getattr(t, f.name) for t in tables]
            if any(p is None for p in parts) or (not parts and f.name == "shard"):
                continue
            columns[f.name] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return cls(**columns)


def _pick(column: np.ndarray | None, index: Any) -> np.ndarray | None:
    return None if column is None else column[index]


_FIELDS = dataclasses.fields(EpisodeTable)


def advance(
    open_eps: OpenEpisodes,
    begin: int,
    done: np.ndarray,
    truncated: np.ndarray | None,
    reward: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, OpenEpisodes]:
    """Episodes that end in ``[begin, begin + n)`` given flags ``[rows, n]``.

    Returns ``(bounds [k, 4], returns [k], new open record)``; rows in row-major order (by
    row, then end time). Vectorised: O(rows * n) numpy work, no Python loop over timesteps.
    """
    ended = done.astype(bool)
    if truncated is not None:
        trunc = truncated.astype(bool)
        ended = ended | trunc
    rows, n = ended.shape
    o_start = np.asarray(open_eps.start, np.int64)
    o_ret = np.asarray(open_eps.returns, np.float64)
    o_flags = np.asarray(open_eps.flags, np.int64)
    # each episode's piece of the rewards summed on its own (one bincount over segment ids):
    # differences of a running sum would carry a NaN, an inf or a huge reward into every later
    # episode of the row
    before = np.cumsum(ended, axis=1) - ended  # episodes of the row ended before each step
    pieces = ended.sum(axis=1) + 1  # per row: its ended episodes, then the open tail
    offsets = np.concatenate([[0], np.cumsum(pieces)[:-1]]).astype(np.int64)
    weights = (
        np.zeros(rows * n, np.float64)
        if reward is None
        else reward.reshape(rows, n).astype(np.float64).ravel()
    )
    sums = np.bincount(
        (offsets[:, None] + before).ravel(), weights=weights, minlength=int(pieces.sum())
    )
    r_idx, t_idx = np.nonzero(ended)
    first = np.ones(r_idx.shape, bool)
    first[1:] = r_idx[1:] != r_idx[:-1]
    prev_t = np.zeros_like(t_idx)
    prev_t[1:] = t_idx[:-1]
    start = np.where(first, o_start[r_idx], begin + prev_t + 1)
    seg = sums[offsets[r_idx] + before[r_idx, t_idx]]
    returns = seg + np.where(first, o_ret[r_idx], 0.0)
    flags = np.where(first, o_flags[r_idx], 0)
    if truncated is not None:
        # Ended by truncation only when not also terminated (a terminal step is terminal).
        cut = trunc[r_idx, t_idx] & ~done.astype(bool)[r_idx, t_idx]
        flags = flags | np.where(cut, FLAG_TRUNCATED, 0)
    bounds = np.stack([r_idx, start, begin + t_idx + 1 - start, flags], axis=1).astype(np.int64)
    has_end = ended.any(axis=1)
    last = np.where(has_end, n - 1 - np.argmax(ended[:, ::-1], axis=1), -1)
    tail = sums[offsets + pieces - 1]
    new_open = OpenEpisodes(
        tuple(np.where(has_end, begin + last + 1, o_start).tolist()),
        tuple(np.where(has_end, tail, o_ret + tail).tolist()),
        tuple(np.where(has_end, 0, o_flags).tolist()),
    )
    return bounds, returns, new_open


def open_table(open_eps: OpenEpisodes, length: int, has_reward: bool) -> EpisodeTable:
    """The open (unfinished) episode of every row that has at least one timestep."""
    start = np.asarray(open_eps.start, np.int64)
    rows = np.flatnonzero(start < length)
    bounds = np.stack(
        [rows, start[rows], length - start[rows], np.asarray(open_eps.flags, np.int64)[rows]],
        axis=1,
    ).astype(np.int64)
    returns = np.asarray(open_eps.returns, np.float64)[rows]
    return EpisodeTable.from_bounds(
        bounds.reshape(-1, 4), returns, has_reward, complete=np.zeros(rows.shape, bool)
    )


def index_metadata(kind: str) -> dict[str, Any]:
    """Zarr v3 metadata of an index array (``bounds`` or ``returns``), grown along axis 0."""
    shape = [0, 4] if kind == "bounds" else [0]
    chunk = [INDEX_CHUNK, 4] if kind == "bounds" else [INDEX_CHUNK]
    return {
        "shape": shape,
        "data_type": "int64" if kind == "bounds" else "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
            {"name": "crc32c"},
        ],
        "fill_value": 0,
        "dimension_names": ["episode", "field"] if kind == "bounds" else ["episode"],
        "attributes": {"fields": BOUNDS_FIELDS} if kind == "bounds" else {},
    }


def index_expect(kind: str, named: bool) -> dict[str, Any]:
    """What an index array's ``zarr.json`` must say (as
    ``vault.storage._arrays.expected_metadata``): dtype, chunk grid, codecs, fill value and, with
    ``named``, its dimension names."""
    meta = index_metadata(kind)
    keys = ["data_type", "chunk_grid", "codecs", "fill_value"] + ["dimension_names"] * named
    return {"chunk_key_encoding": CHUNK_KEYS, **{k: meta[k] for k in keys}}
