"""The reading methods of :class:`~vault.Dataset` (by concern): what it holds (shards, lengths,
commits), one shard's data, or every shard's as one (statistics, xarray, streams)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from vault._args import kind, known_options
from vault._errors import VaultArgumentError, VaultNotFoundError

if TYPE_CHECKING:
    from vault.dataset._shards import Shard
    from vault.facade._vault import Vault
    from vault.format._records import Manifest
    from vault.storage._location import Location
    from vault.stream._stream import DatasetStream
    from vault.stream._windows import WindowStream


class DatasetReadMethods:
    """Mixed into :class:`~vault.Dataset`: what it shows and reads, from the records of its
    shards that the dataset keeps (``_where``, ``_template``, ``_shards``)."""

    _where: Location
    _template: Manifest
    _shards: dict[str, Shard]

    @property
    def location(self) -> str:
        """The dataset's root, as a path or URL."""
        return str(self._where)

    @property
    def template(self) -> Manifest:
        """The structure every shard has (a manifest; ``rows`` is the default)."""
        return self._template

    @property
    def manifest(self) -> Manifest:
        """The same as :attr:`template`."""
        return self._template

    @property
    def shards(self) -> list[str]:
        """The visible shards' names, sorted."""
        return list(self._shards)

    def vault(self, shard: str) -> Vault:
        """Returns the read-only vault of a shard.

        Args:
            shard: the shard's name.

        Raises:
            VaultArgumentError: no such shard.
        """
        if not isinstance(shard, str):
            raise VaultArgumentError(
                f"{self._where}: no shard {kind(shard)}: shards are named by strings; the "
                f"dataset has {self.shards}"
            )
        try:
            return self._shards[shard].opened()
        except KeyError:
            raise VaultArgumentError(
                f"{self._where}: no shard {shard!r}; the dataset has {self.shards}"
            ) from None

    def vaults(self) -> Iterator[tuple[str, Vault]]:
        """Returns ``(name, vault)`` of every shard, read-only (each opened on first use)."""
        return iter([(name, self.vault(name)) for name in self._shards])

    @property
    def snapshots(self) -> list[Any]:
        """Every shard's current snapshot, in shard order."""
        return [s.opened().snapshot for s in self._shards.values()]

    @property
    def committed_lengths(self) -> dict[str, int]:
        """Shard name -> committed timesteps per row."""
        return {name: s.length for name, s in self._shards.items()}

    @property
    def commit_ids(self) -> dict[str, str]:
        """Shard name -> the id of the commit read."""
        return {name: s.commit_id for name, s in self._shards.items()}

    @property
    def timesteps(self) -> int:
        """Committed timesteps of every row of every shard."""
        return sum(s.rows * s.length for s in self._shards.values())

    @property
    def leaf_names(self) -> list[str]:
        """Every leaf's path, in the structure's leaf order (a dict's keys sorted, a tuple's or
        named tuple's fields in order: the order ``jax.tree_util`` flattens it in)."""
        return self._template.leaf_names

    @property
    def has_episodes(self) -> bool:
        """Whether the shards keep an episode index (as :attr:`Vault.has_episodes`)."""
        return self._template.episodes is not None

    def read_numpy(self, shard: str, **options: Any) -> Any:
        """Returns :meth:`Vault.read_numpy` of one shard.

        Args:
            shard: the shard's name.
            **options: as :meth:`Vault.read_numpy` takes them (``rows``, ``last``, ...).

        Raises:
            VaultArgumentError: no such shard.
        """
        return self.vault(shard).read_numpy(**options)

    def read(self, shard: str, **options: Any) -> Any:
        """Returns :meth:`Vault.read` of one shard (a trajectory-buffer state).

        Args:
            shard: the shard's name.
            **options: as :meth:`Vault.read` takes them (``last``, ``capacity``, ...).

        Raises:
            VaultArgumentError: no such shard.
        """
        return self.vault(shard).read(**options)

    def leaf_stats(self, **options: Any) -> Any:
        """Returns :func:`vault.leaf_stats` over every shard's committed data.

        Args:
            **options: as :func:`vault.leaf_stats` takes them (``leaves``, ``progress``).

        Raises:
            VaultArgumentError: an option :func:`vault.leaf_stats` does not take.
        """
        from vault._args import known_options
        from vault.facade._stats import leaf_stats

        known_options("leaf_stats", options, leaf_stats)
        return leaf_stats(self, **options)

    def to_xarray(self, *, leaves: Sequence[str] | None = None, episodes: bool = True) -> Any:
        """Every shard as a lazy, dask-backed ``xarray.Dataset`` in one ``xarray.DataTree``.

        See :func:`vault.to_xarray`.

        Args:
            leaves: leaf paths to include (default: every leaf).
            episodes: add each shard's episode index.

        Returns:
            An ``xarray.DataTree`` with one Dataset per shard at ``shards/<name>``.
        """
        from vault.read._xarray import to_xarray

        return to_xarray(self, leaves=leaves, episodes=episodes)

    def as_dataset(
        self, sample_batch_size: int, sequence_length: int, **options: Any
    ) -> DatasetStream:
        """Batches of sequences streamed from every shard (see :meth:`Vault.as_dataset`).

        An epoch visits every valid start of every shard exactly once
        (``StreamBatch.source`` indexes :attr:`shards`).

        Args:
            sample_batch_size: sequences per batch.
            sequence_length: timesteps per sequence.
            **options: as :meth:`Vault.as_dataset` takes them: ``shuffle``, ``seed``,
                ``prefetch``, ``episode_aware``, ``stride``, ``block_timesteps``,
                ``block_rows``, ``interleave``, ``run_blocks``, ``rows``, ``leaves``,
                ``epochs``, ``drop_remainder``, ``device_put``, ``sharding``,
                ``process_index``, ``process_count``, ``resume_at``, ``cut_on_device``,
                ``stack`` (stacks of consecutive batches for a ``jax.lax.scan``).

        Returns:
            The stream.

        Raises:
            VaultNotFoundError: the dataset has no shard yet.
            VaultArgumentError: as :meth:`Vault.as_dataset`: an unknown option, one of the
                wrong type.
            VaultReadError: as :meth:`Vault.as_dataset`: a value out of range, too little
                data for one batch (shards that hold no timesteps yet included).
        """
        from vault.stream._stream import as_dataset

        known_options("as_dataset", options, as_dataset)
        self.check_open()
        return as_dataset(self.snapshots, sample_batch_size, sequence_length, **options)

    def iter_windows(self, window: int, **options: Any) -> WindowStream:
        """Windows of every shard as trajectory-buffer states (see :meth:`Vault.iter_windows`).

        Args:
            window: timesteps per window.
            **options: as :meth:`Vault.iter_windows` takes them.

        Returns:
            The stream of states.

        Raises:
            VaultNotFoundError: the dataset has no shard yet.
            VaultArgumentError: as :meth:`Vault.iter_windows`: an unknown option, one of the
                wrong type.
            VaultReadError: as :meth:`Vault.iter_windows`: a value out of range, windows that
                would not fit in memory.
        """
        from vault.stream._windows import iter_windows

        known_options("iter_windows", options, iter_windows)
        self.check_open()
        return iter_windows(self.snapshots, window, **options)

    def check_open(self) -> None:
        """Raise :class:`VaultNotFoundError` if the dataset has no shard yet."""
        if not self.shards:
            raise VaultNotFoundError(f"{self.location}: the dataset has no shard yet")

    def __repr__(self) -> str:
        return f"Dataset({self._where}, shards={len(self._shards)})"

    def describe(self) -> dict[str, Any]:
        """Returns a JSON-ready summary: shards with rows, committed length and commit id."""
        return {
            "path": self.location,
            "kind": "dataset",
            "shards": [
                {
                    "shard": name,
                    "rows": v.rows,
                    "committed": v.length,
                    "commit": v.commit_id,
                }
                for name, v in self._shards.items()
            ],
            "timesteps": self.timesteps,
            "leaves": [leaf.name for leaf in self._template.leaves],
        }
