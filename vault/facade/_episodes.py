"""The episode methods of :class:`~vault.Vault` (its facade, by concern): the episode index
and episodes read as trees. They work on the Vault's current snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vault._args import bool_arg, kind, once
from vault._errors import VaultArgumentError, VaultReadError
from vault.format import _structure
from vault.format._episodes import EpisodeTable
from vault.read import _read

if TYPE_CHECKING:
    from vault.commits._snapshot import Snapshot


class EpisodeMethods:
    """Mixed into :class:`~vault.Vault`: needs its ``snapshot``."""

    @property
    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    @property
    def has_episodes(self) -> bool:
        """Whether this vault keeps an episode index (created with ``done_leaf``)."""
        return self.snapshot.manifest.episodes is not None

    @property
    def episode_leaves(self) -> dict[str, str | None]:
        """The leaves that delimit episodes: ``{"done", "truncated", "reward"}`` -> path."""
        cfg = self.snapshot.manifest.episodes
        if cfg is None:
            return {"done": None, "truncated": None, "reward": None}
        return cfg.as_dict()

    def episodes(self, include_open: bool = False) -> EpisodeTable:
        """The committed episode index (loaded from the index arrays, no scan of the data).

        Args:
            include_open: also the unfinished last episode of every row, appended after the
                complete ones (``complete`` false, its length and return so far).

        Returns:
            Complete episodes in the order they were committed (by write, then row, then
            time).

        Raises:
            VaultReadError: the vault keeps no episode index (created without
                ``done_leaf``).
            VaultCorruptError: the index arrays failed validation.

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> example = {"r": np.float32(0), "done": np.bool_(False)}
            >>> with Vault.create("runs/doc", example, rows=1, done_leaf="done",
            ...                   reward_leaf="r") as v:
            ...     v.append({"r": np.ones((1, 6), np.float32),
            ...               "done": np.array([[0, 0, 1, 0, 1, 0]], bool)})
            6
            >>> table = Vault.open("runs/doc").episodes()
            >>> table.length.tolist(), table.returns.tolist()
            ([3, 2], [3.0, 2.0])
        """
        return _read.episode_table(self.snapshot, bool_arg("include_open", include_open))

    def read_episode(
        self, episode: int | EpisodeTable, *, leaves: Sequence[str] | None = None
    ) -> Any:
        """One episode's timesteps.

        Args:
            episode: a position in :meth:`episodes`, or a one-row :class:`EpisodeTable`.
            leaves: leaf paths to read (default: every leaf; a subset gives a dict).

        Returns:
            The vault's structure with leaves ``[length, ...]``.

        Raises:
            VaultReadError: no such episode, or a table of more than one episode.
        """
        snap = self.snapshot
        one = _read.one_episode(snap, episode)
        return _episode_data(snap, one, leaves)

    def iter_episodes(
        self, table: EpisodeTable | None = None, *, leaves: Sequence[str] | None = None
    ) -> Iterator[Any]:
        """Every episode of ``table``, one after the other, as :meth:`read_episode` reads it.

        The arguments are checked at the call, not at the first ``next()``.

        Args:
            table: the episodes (default: every complete one).
            leaves: leaf paths to read (default: every leaf).

        Returns:
            An iterator of episodes (leaves ``[length, ...]``).

        Raises:
            VaultArgumentError: ``table`` is not an :class:`EpisodeTable`.
            VaultReadError: leaves that the vault does not have.
        """
        snap = self.snapshot
        if table is not None and not isinstance(table, EpisodeTable):
            raise VaultArgumentError(
                f"iter_episodes takes an EpisodeTable (from vault.episodes()), got {kind(table)}"
            )
        chosen = _read.episode_table(snap) if table is None else table
        if table is not None:
            _within(snap, table)
        leaves = once(leaves)  # read for every episode: an iterator only once
        if leaves is not None:
            _read.leaf_selection(snap, leaves)
        return (_episode_data(snap, chosen[i], leaves) for i in range(len(chosen)))


def _within(snap: Snapshot, table: EpisodeTable) -> None:
    """Every episode of ``table`` lies in the snapshot's committed data (a table of a later
    commit, or of another vault, may not), else :class:`VaultReadError` naming the first."""
    rows, starts = np.asarray(table.row), np.asarray(table.start)
    stops = starts + np.asarray(table.length)
    outside = np.flatnonzero(
        (rows < 0) | (rows >= snap.rows) | (starts < 0) | (stops > snap.length)
    )
    if outside.size:
        i = int(outside[0])
        raise VaultReadError(
            f"{snap.where}: episode {i} of the table (row {int(rows[i])}, timesteps "
            f"{int(starts[i])}-{int(stops[i]) - 1}) lies outside this vault's committed "
            f"{snap.rows} rows x {snap.length} timesteps (a table of a later commit or of "
            "another vault?)" + (f"; {outside.size} episodes in all" if outside.size > 1 else "")
        )


def _episode_data(snap: Snapshot, one: EpisodeTable, leaves: Sequence[str] | None) -> Any:
    _within(snap, one)
    row, start, length = int(one.row[0]), int(one.start[0]), int(one.length[0])
    data = _read.read_numpy(snap, [row], start, start + length, leaves)
    if leaves is not None:
        return {name: value[0] for name, value in data.items()}
    # the vault's own structure (a dataclass or named tuple that JAX does not know included)
    node = snap.manifest.structure
    return _structure.build(node, [x[0] for x in _structure.leaves(data, node)])
