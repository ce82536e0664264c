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

    def episode_seams(
        self,
        *,
        start: int | None = None,
        stop: int | None = None,
        capacity: int | None = None,
        rows: Sequence[int] | slice | None = None,
    ) -> dict[str, Any]:
        """The seams of a read as the episode buffer's ``from_state`` takes them.

        For ``read(start=start, stop=stop, capacity=capacity, rows=rows)``: the seams inside the
        timesteps that state holds, counted from the first one it holds, as ``restarts``
        (rows begin new episodes there, whose starts are known) and ``gaps`` (where the
        episode that goes on has no known start: a seam that lost timesteps, or one the
        episode index marks so, such as the first write of a new buffer), and
        ``start_known``: whether each row's first timestep held begins an episode (from the
        index; None without one, for ``from_state``'s default). So
        ``buffer.from_state(v.read(**where), **v.episode_seams(**where))``.

        Args:
            start: first timestep, as in :meth:`~vault.Vault.read` (default 0).
            stop: timestep after the last (default: the committed length).
            capacity: the state's time axis, as in :meth:`~vault.Vault.read` (default: the
                range's length): a smaller one holds the last ``capacity`` timesteps.
            rows: the rows read, as in :meth:`~vault.Vault.read` (default: every row):
                ``start_known`` has one flag per row read, in the read's order.

        Returns:
            A dict of ``restarts`` (a list of int), ``gaps`` (a list of int) and
            ``start_known`` (a bool per row, or None).

        Raises:
            VaultReadError: a time range the vault does not have, or a ``capacity`` below 1.

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> example = {"r": np.float32(0), "done": np.bool_(False)}
            >>> with Vault.create("runs/doc", example, rows=1, done_leaf="done") as v:
            ...     v.append({"r": np.ones((1, 4), np.float32),
            ...               "done": np.array([[0, 1, 0, 0]], bool)})
            ...     v.append({"r": np.ones((1, 3), np.float32),
            ...               "done": np.zeros((1, 3), bool)}, continues=False)
            4
            3
            >>> Vault.open("runs/doc").episode_seams(start=1)
            {'restarts': [3], 'gaps': [], 'start_known': [False]}
        """
        snap = self.snapshot
        lo, hi = _read.time_range(snap, start, stop)
        length, cap = _read.state_length(snap, lo, hi, capacity)
        rows = once(rows)
        chosen = None if rows is None else np.arange(snap.rows)[_read.row_selection(snap, rows)]
        held = hi - min(cap, length)  # the first timestep the state holds
        seams = [s for s in snap.commit.seams if held <= s.at < hi]
        # where the episode going on has no known start: after lost timesteps, or where the
        # index says so (a new buffer's first write)
        unknown = {s.at for s in seams if s.lost}
        known: list[bool] | None = None
        if self.has_episodes:
            table = self.episodes(include_open=True)
            unknown |= {int(t) for t in table.start[~table.start_known]}
            if any(s.at == held for s in seams):  # a seam: the same for every row
                known = [held not in unknown] * snap.rows
            elif held == 0:  # the vault's start: as its index has it (a derived slice's
                # first episodes may have begun before it)
                first = {
                    int(r): bool(k)
                    for r, t, k in zip(table.row, table.start, table.start_known, strict=True)
                    if t == 0
                }
                known = [first.get(row, False) for row in range(snap.rows)]
            else:  # after an episode's end (a done or truncated flag), or mid-episode
                flags = [p for k, p in self.episode_leaves.items() if p and k != "reward"]
                ends = _read.read_numpy(snap, None, held - 1, held, flags)
                known = np.logical_or.reduce([ends[p][:, 0] for p in flags]).tolist()
        if known is not None and chosen is not None:
            known = [known[int(r)] for r in chosen.reshape(-1)]
        inside = [s.at for s in seams if s.at > held]
        return {
            "restarts": [at - held for at in inside if at not in unknown],
            "gaps": [at - held for at in inside if at in unknown],
            "start_known": known,
        }

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
            _within(snap, _read.of_this_shard(snap, table))
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
