"""The reading methods of :class:`~vault.Vault` (its facade, by concern): the committed data
as numpy arrays, as a buffer state, as xarray, and streamed. They work on the Vault's current
snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vault._args import known_options
from vault._errors import VaultReadError
from vault.read import _read

if TYPE_CHECKING:
    from vault.commits._snapshot import Snapshot
    from vault.stream._stream import DatasetStream
    from vault.stream._windows import WindowStream


class ReadMethods:
    """Mixed into :class:`~vault.Vault`: needs its ``snapshot``."""

    @property
    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    def read_numpy(
        self,
        *,
        rows: Sequence[int] | slice | None = None,
        start: int | None = None,
        stop: int | None = None,
        last: int | None = None,
        percentiles: tuple[float, float] | None = None,
        leaves: Sequence[str] | None = None,
    ) -> Any:
        """Committed data as numpy arrays ``[rows, time, ...]`` (no device transfer).

        Give at most one of ``start``/``stop``, ``last`` and ``percentiles`` (default: every
        committed timestep).

        Args:
            rows: row indices or a slice (default: every row).
            start: first timestep (default 0).
            stop: timestep after the last (default: the committed length).
            last: the last ``last`` timesteps.
            percentiles: ``(a, b)``: the timesteps between ``a`` and ``b`` percent of the
                committed length.
            leaves: leaf paths to read (``"obs"``, ``"info/x"``; default: every leaf).

        Returns:
            The vault's structure (containers as written) with numpy leaves or, when
            ``leaves`` selects a subset, a dict ``{path: array}``.

        Raises:
            VaultReadError: rows, a time range or leaves that the vault does not have.
            VaultCorruptError: a chunk failed its checksum or is missing (named).

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=2) as v:
            ...     v.append({"x": np.arange(10, dtype=np.float32).reshape(2, 5)})
            5
            >>> Vault.open("runs/doc").read_numpy(rows=[1], last=2)["x"].tolist()
            [[8.0, 9.0]]
        """
        snap = self.snapshot
        lo, hi = _read.time_range(snap, start, stop, last, percentiles)
        return _read.read_numpy(snap, rows, lo, hi, leaves)

    def read(
        self,
        timesteps: int | None = None,
        percentiles: tuple[float, float] | None = None,
        *,
        last: int | None = None,
        rows: Sequence[int] | slice | None = None,
        start: int | None = None,
        stop: int | None = None,
        leaves: Sequence[str] | None = None,
        capacity: int | None = None,
    ) -> Any:
        """Committed data as a trajectory-buffer state, to sample from or to keep adding to.

        Args:
            timesteps: the reference's name for ``last``.
            percentiles: ``(a, b)``: the timesteps between ``a`` and ``b`` percent of the
                committed length.
            last: the last ``last`` timesteps.
            rows: row indices or a slice (default: every row).
            start: first timestep (default 0).
            stop: timestep after the last (default: the committed length).
            leaves: leaf paths to read (default: every leaf).
            capacity: the state's time axis. The data fills its start and
                ``current_index``/``is_full`` are set so that ``add`` continues after it;
                when ``capacity`` is smaller than the data, the most recent ``capacity``
                timesteps are kept where a ring buffer that had every timestep read added
                holds them (timestep ``t`` of the read at ``t % capacity``, the next add at
                ``current_index``, the read's length modulo ``capacity``). In both cases
                ``write_counter`` is the count read, so the state can be added to and
                written to a vault as any buffer's.

        Returns:
            A ``buffers.TrajectoryBufferState`` with leaves ``[rows, time, ...]`` on the
            default device: the trajectory, flat, item and n-step buffers of the same shape
            take it, the episode buffer through its ``from_state`` (with
            :meth:`episode_seams`); a prioritised buffer does not (it keeps priorities
            this state has none of): add :meth:`read_numpy`'s arrays to its ``init`` state.

        Raises:
            VaultReadError: rows, a time range or leaves that the vault does not have, both
                ``last`` and ``timesteps``, or a ``capacity`` below 1.
            VaultCorruptError: a chunk failed its checksum or is missing (named).

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=2) as v:
            ...     v.append({"x": np.zeros((2, 5), np.float32)})
            5
            >>> state = Vault.open("runs/doc").read(capacity=16)
            >>> state.experience["x"].shape, int(state.current_index), bool(state.is_full)
            ((2, 16), 5, False)
        """
        if timesteps is not None and last is not None:
            raise VaultReadError("give last or timesteps (the same thing), not both")
        snap = self.snapshot
        chosen = last if last is not None else timesteps
        name = "last" if last is not None else "timesteps"
        lo, hi = _read.time_range(snap, start, stop, chosen, percentiles, last_name=name)
        return _read.read_state(snap, rows, lo, hi, leaves, capacity)

    def to_xarray(self, *, leaves: Sequence[str] | None = None, episodes: bool = True) -> Any:
        """The committed data as a lazy, dask-backed ``xarray.Dataset``.

        See :func:`vault.to_xarray`.

        Args:
            leaves: leaf paths to include (default: every leaf).
            episodes: add the episode index as variables on dimension ``episode``.

        Returns:
            An ``xarray.Dataset``, one variable per leaf, dims ``row``, ``time`` and the
            leaf's item axes.

        Raises:
            VaultDependencyError: xarray or dask is not installed (``rlvault[xarray]``).
        """
        from vault.read._xarray import to_xarray

        return to_xarray(self.snapshot, leaves=leaves, episodes=episodes)

    def as_dataset(
        self, sample_batch_size: int, sequence_length: int, **options: Any
    ) -> DatasetStream:
        """Batches of sequences streamed from disk with background prefetch.

        For vaults larger than memory: an epoch yields every valid sequence start exactly
        once (not across a seam; with ``episode_aware``, not across an episode end), in
        shuffled order, a few blocks of the vault in memory at a time.

        Args:
            sample_batch_size: sequences per batch (the global batch when several processes
                share each epoch).
            sequence_length: timesteps per sequence.
            **options: ``shuffle``, ``seed``, ``prefetch``, ``episode_aware``, ``stride``,
                ``block_timesteps``, ``block_rows``, ``interleave``, ``run_blocks``, ``rows``,
                ``leaves``, ``epochs`` (``None``: forever), ``drop_remainder``,
                ``device_put``, ``sharding``, ``process_index``, ``process_count``,
                ``resume_at``, ``cut_on_device``, ``stack`` (``stack`` consecutive batches
                per item on a new leading axis, for a ``jax.lax.scan``) (see
                :class:`~vault.DatasetStream`).

        Returns:
            An iterable of :class:`~vault.StreamBatch` whose ``state()`` checkpoints it.

        Raises:
            VaultArgumentError: an unknown option, one of the wrong type (a float or a
                bool for an int, a string for a flag), or a ``stack`` below 1.
            VaultReadError: another value out of range (a batch size, sequence length or
                ``stride`` below 1, a negative ``prefetch`` or ``epochs``), too little data
                for one batch, or ``episode_aware`` on a vault without an episode index.
                Where the data are long enough but seams (or, ``episode_aware``, episode
                ends) leave no batch of whole sequences, the stream raises it as it starts,
                at the first ``next()``.

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> with Vault.create("runs/doc", {"x": np.float32(0)}, rows=2) as v:
            ...     v.append({"x": np.zeros((2, 20), np.float32)})
            20
            >>> stream = Vault.open("runs/doc").as_dataset(4, 8, seed=0)
            >>> [batch.experience["x"].shape for batch in stream][:2]
            [(4, 8), (4, 8)]
        """
        from vault.stream._stream import as_dataset

        known_options("as_dataset", options, as_dataset)
        return as_dataset(self.snapshot, sample_batch_size, sequence_length, **options)

    def iter_windows(self, window: int, **options: Any) -> WindowStream:
        """Successive windows of ``window`` timesteps as trajectory-buffer states.

        Each epoch visits every committed timestep once, window after window (optionally
        shuffled); the next windows are read ahead in the background. Every state has a time
        axis of ``capacity`` (default ``window``), so a jitted ``sample`` never retraces.

        Args:
            window: timesteps per window.
            **options: ``shuffle``, ``seed``, ``prefetch``, ``capacity``, ``rows``,
                ``leaves``, ``epochs`` (``None``: forever), ``drop_remainder``.

        Returns:
            An iterable of ``buffers.TrajectoryBufferState`` (see
            :class:`~vault.WindowStream`).

        Raises:
            VaultArgumentError: an unknown option, or one of the wrong type.
            VaultReadError: a value out of range (a ``window`` below 1, a negative
                ``prefetch``), a ``capacity`` below ``window``, or windows that would not fit
                in memory.
        """
        from vault.stream._windows import iter_windows

        known_options("iter_windows", options, iter_windows)
        return iter_windows(self.snapshot, window, **options)
