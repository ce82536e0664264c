"""The Vault: a facade over the pieces that store buffer states as Zarr v3 arrays.

``Vault.create`` / ``Vault.open`` / ``Vault(...)`` (the reference-style constructor) give a
vault at a location (``vault/storage/_location.py``). Reads work on an immutable snapshot of the
latest commit (``vault/commits/_snapshot.py``, ``vault/read/_read.py``); writes go through the
vault's one writer (``vault/write/_writer.py``: planning, the commit protocol, background queue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from vault._args import int_arg, known_options
from vault._errors import VaultArgumentError, VaultModeError, VaultReadError
from vault.commits._pins import Pin, at_pin, commit_id, create_tag, fingerprint, list_tags
from vault.commits._snapshot import Snapshot, load_snapshot
from vault.facade._compat import ReferenceTarget, reference_target
from vault.facade._episodes import EpisodeMethods
from vault.format._records import Manifest, Seam
from vault.read import _read
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import LockHolder
from vault.write._create import create_vault, plan_manifest
from vault.write._plan import OnOverrun
from vault.write._writer import Writer

if TYPE_CHECKING:
    from vault.stream._stream import DatasetStream
    from vault.stream._windows import WindowStream


class Vault(EpisodeMethods):
    """A dataset of timesteps ``[rows, time, ...]`` per leaf, appended from buffer states.

    Create with :meth:`Vault.create`, open with :meth:`Vault.open`; ``Vault(name, ...)``
    behaves like the reference's constructor (opens if present, else creates).
    """

    _after_close: Callable[[], None] | None = None  # run once a writer has closed

    def __init__(
        self,
        vault_name: str,
        experience_structure: Any = None,
        rel_dir: str = "vaults",
        vault_uid: str | None = None,
        compression: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        storage: dict[str, Any] | None = None,
    ) -> None:
        """The reference's constructor: open the vault at ``rel_dir/vault_name/vault_uid``,
        or create it there from ``experience_structure`` (a buffer state or its
        ``experience``; None: only open). ``vault_uid`` None: the latest run (creating: a
        timestamp); ``compression``: the reference's codec dict; ``storage``: as in
        :meth:`create`. The writer lock is taken by the first write, as in the reference.

        As the reference, a buffer this object has not written is appended whole. Unlike it,
        an overrun of the buffer this object wrote last is never silent: ``write`` raises
        :class:`UnsavedDataLostError` with the exact count lost (or, with
        ``on_overrun="save_surviving"``, records that count as a seam), as after :meth:`open`.

        Raises:
            VaultNotFoundError: no vault there and no ``experience_structure``.
        """
        where = parse_location(rel_dir, storage, argument="rel_dir")
        target = reference_target(vault_name, experience_structure, where, vault_uid, compression)
        self.__dict__.update(_reference_vault(target, metadata).__dict__)

    def _setup(self, snap: Snapshot, mode: str, writer: Writer | None) -> None:
        self._snap = snap
        self._mode = mode
        self._writer = writer
        self._closed = False
        self._max_pending = 2
        self._adopt_buffers = False
        self._pinned = False

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls,
        location: LocationLike,
        structure_or_state: Any,
        *,
        rows: int | None = None,
        codec: str | None = "auto",
        level: int | None = None,
        chunk: dict[str, Sequence[int]] | None = None,
        metadata: dict[str, Any] | None = None,
        done_leaf: str | None = None,
        truncated_leaf: str | None = None,
        reward_leaf: str | None = None,
        storage: dict[str, Any] | None = None,
    ) -> Vault:
        """Create an empty vault at ``location`` shaped like a buffer state.

        ``location``: a path, a ``file://``, ``memory://`` or ``s3://bucket/prefix`` URL, or
        a TensorStore kvstore spec; ``storage``: settings of an object store over the AWS
        environment variables (``endpoint``, ``region``, ``access_key_id``, ``retries``, ...:
        see the README).
        ``structure_or_state`` is a buffer state (rows and per-timestep shapes are taken
        from it) or one example timestep with ``rows`` given. ``codec``: ``"auto"`` (zstd-3
        for one-byte leaves such as frames, shuffled blosc-zstd-1 for wider numbers),
        ``"zstd"``, ``"blosc"``, ``"lz4"``, ``"gzip"`` or ``None``, at ``level``; every chunk
        also gets a ``crc32c`` checksum.
        ``chunk`` maps leaf paths to chunk shapes ``[rows, time, ...]`` to override the
        default (whole frames x about 2 MiB of timesteps per row for large items, all rows x
        about 256 KiB for small ones).
        ``done_leaf`` (a leaf path such as ``"done"``; optionally ``truncated_leaf`` and
        ``reward_leaf``) turns on the episode index: see :meth:`episodes`.
        ``metadata`` is stored as JSON: what JSON would change or refuse (a non-string key,
        a tuple, NaN, a numpy scalar) is :class:`VaultMetadataError`, naming its key path.
        Every argument is checked before anything is written; the location must be empty
        or absent (:class:`VaultExistsError` names what is there).
        """
        where = parse_location(location, storage)
        episodes = {"done": done_leaf, "truncated": truncated_leaf, "reward": reward_leaf}
        manifest = plan_manifest(
            structure_or_state, rows=rows, codec=codec, level=level, chunk=chunk,
            metadata=metadata, episodes=episodes,
        )  # fmt: skip
        return vault_of_writer(create_vault(where, manifest))  # refuses a non-empty location

    @classmethod
    def open(
        cls,
        location: LocationLike,
        mode: Literal["r", "a"] = "r",
        *,
        at: Pin | None = None,
        storage: dict[str, Any] | None = None,
    ) -> Vault:
        """Open an existing vault, read-only (``"r"``, no lock: any number of readers) or for
        appending (``"a"``: takes the writer lock, :class:`VaultLockedError` if held).
        ``at``: read the vault as it was at a commit (its number, its id such as
        ``"12-3f9a0c1b2d4e"`` from :attr:`commit_id`, or a tag): every read, stream and table
        sees exactly that commit's data, in any process, after any number of later appends
        (``"r"`` only; :class:`VaultPinError` if the vault cannot serve it). ``storage``: as
        in :meth:`create`."""
        if at is not None and mode != "r":
            raise VaultArgumentError(f"at= pins a commit for reading: use mode='r', not {mode!r}")
        vault = cls._open(parse_location(location, storage), mode, lazy_lock=False)
        if at is not None:
            vault._snap, vault._pinned = at_pin(vault._snap, at), True
        return vault

    @classmethod
    def _open(cls, location: LocationLike, mode: str, lazy_lock: bool) -> Vault:
        if mode not in ("r", "a"):
            raise VaultArgumentError(f"mode must be 'r' or 'a', got {mode!r}")
        where = parse_location(location)
        snap = load_snapshot(where, writable=mode == "a")
        vault = cls.__new__(cls)
        vault._setup(snap, mode, None)
        if mode == "a" and not lazy_lock:
            vault._take_writer()
        return vault

    def _take_writer(self) -> Writer:
        if self._writer is None:
            location = self._snap.location
            lock = location.writer_lock()
            try:
                location.recover()
                # the vault as the lock's holder finds it: arrays opened afresh (a writer
                # that closed since this Vault was opened may have cut their shapes)
                self._writer = Writer(self._snap.reopened(), lock)
            except BaseException:
                lock.release()
                raise
            self._writer.max_pending = self._max_pending
            self._writer.adopt_buffers = self._adopt_buffers
        return self._writer

    def refresh(self) -> int:
        """Re-read the commit record (see appends by another process); returns the length.

        On a writer it first waits for its pending writes (its own commits are the truth)."""
        if self._writer is not None:
            self._writer.refresh()
        elif not self._pinned:  # a pinned vault stays at its commit
            self._snap = self._snap.refreshed()
        return self.committed_length

    def close(self) -> None:
        """Wait for pending writes, then release the writer lock (if held). Reading methods
        keep working; writes do not."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
        finally:
            if writer is not None:
                self._snap = writer.snapshot
            self._closed = True
        if writer is not None and self._after_close is not None:
            self._after_close()  # e.g. a dataset's catalog notes the shard (never raises)

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Vault({self.location!r}, rows={self.rows}, committed_length={self.committed_length}, "
            f"leaves={self.leaf_names})"
        )

    # ----------------------------------------------------------------------------- properties
    @property
    def snapshot(self) -> Snapshot:
        """The committed state this Vault reads now (immutable; :meth:`refresh` moves on)."""
        return self._writer.snapshot if self._writer is not None else self._snap

    @property
    def location(self) -> str:
        return str(self._snap.location)

    @property
    def committed_length(self) -> int:
        """Committed timesteps per row."""
        return self.snapshot.length

    vault_index = committed_length

    @property
    def commit_id(self) -> str:
        """The id of the commit this Vault reads (``"<number>-<uid>"``): pass it as
        ``Vault.open(location, at=...)`` to read exactly this data later."""
        return commit_id(self.snapshot.commit)

    def fingerprint(self) -> str:
        """The content fingerprint of the commit this Vault reads (from the chunks' stored
        checksums: a byte-for-byte copy has the same one, any changed value another)."""
        return fingerprint(self.snapshot)

    def tag(self, name: str) -> str:
        """Name the commit this Vault reads ``name`` (usable as ``at=``); a tag never moves
        (:class:`VaultExistsError`). Needs no writer lock. Returns the commit id."""
        return create_tag(self.snapshot, name)

    def tags(self) -> dict[str, str]:
        """Every tag of the vault: name -> commit id."""
        return list_tags(self.snapshot)

    @property
    def rows(self) -> int:
        return self._snap.rows

    @property
    def leaf_names(self) -> list[str]:
        return self._snap.names

    @property
    def metadata(self) -> dict[str, Any]:
        """User metadata given at creation (reserved keys live elsewhere in the manifest)."""
        return dict(self._snap.manifest.user_metadata)

    @property
    def manifest(self) -> Manifest:
        """The vault's manifest (structure, leaves, rows, episode leaves, versions)."""
        return self._snap.manifest

    @property
    def seams(self) -> list[Seam]:
        """The seams of the data: at ``Seam(at, lost)`` the timesteps at ``at - 1`` and ``at``
        are not consecutive. ``lost > 0``: that many timesteps per row were lost there
        (``on_overrun="save_surviving"``); ``lost == 0``: the rows restarted there
        (``append(..., continues=False)``, the seams of :func:`~vault.combine`, where a write
        appended another buffer than the one before). Streams never
        cut a sequence across a seam, and no episode runs across one."""
        return list(self.snapshot.commit.seams)

    @property
    def gaps(self) -> list[dict[str, int]]:
        """:attr:`seams` as ``{"at", "lost"}`` dicts (the name of earlier versions)."""
        return [seam.to_json() for seam in self.seams]

    @property
    def max_pending(self) -> int:
        """Non-blocking writes that may wait in the background before ``write`` blocks."""
        return self._max_pending

    @max_pending.setter
    def max_pending(self, value: int) -> None:
        self._max_pending = int_arg("max_pending", value, 1)
        if self._writer is not None:
            self._writer.max_pending = self._max_pending

    def lock_holder(self) -> LockHolder | None:
        """Who holds this vault's writer lock now (None: nobody, or the location cannot
        tell)."""
        return self._snap.location.lock_holder()

    # ----------------------------------------------------------------------------- reading
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

        Returns the vault's structure (containers as written) or, when ``leaves`` selects a
        subset by path (``"obs"``, ``"info/x"``), a dict ``{path: array}``.
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
        """Committed data as a trajectory-buffer state: the last ``last`` timesteps
        (``timesteps`` is the reference's name for it), a ``percentiles`` range or
        ``start``/``stop``.

        With ``capacity`` the state's time axis has that length: the data fills its start,
        ``current_index``/``is_full`` are set so that ``add`` continues after it (when
        ``capacity`` is smaller than the data, the most recent ``capacity`` timesteps are kept).
        """
        if timesteps is not None and last is not None:
            raise VaultReadError("give last or timesteps (the same thing), not both")
        snap = self.snapshot
        chosen = last if last is not None else timesteps
        name = "last" if last is not None else "timesteps"
        lo, hi = _read.time_range(snap, start, stop, chosen, percentiles, last_name=name)
        return _read.read_state(snap, rows, lo, hi, leaves, capacity)

    def to_xarray(self, *, leaves: Sequence[str] | None = None, episodes: bool = True) -> Any:
        """The committed data as a lazy, dask-backed ``xarray.Dataset``: :func:`vault.to_xarray`."""
        from vault.read._xarray import to_xarray

        return to_xarray(self.snapshot, leaves=leaves, episodes=episodes)

    # ----------------------------------------------------------------------------- streaming
    def as_dataset(
        self, sample_batch_size: int, sequence_length: int, **options: Any
    ) -> DatasetStream:
        """Batches of sequences streamed from disk with background prefetch, for vaults larger
        than memory; see :func:`vault.stream._stream.as_dataset` for the options (``shuffle``,
        ``seed``, ``episode_aware``, ``epochs``, ``sharding``, ``process_index``, ...)."""
        from vault.stream._stream import as_dataset

        known_options("as_dataset", options, as_dataset)
        return as_dataset(self.snapshot, sample_batch_size, sequence_length, **options)

    def iter_windows(self, window: int, **options: Any) -> WindowStream:
        """Successive (optionally shuffled) windows of ``window`` timesteps as trajectory-buffer
        states, read ahead in the background; see :func:`vault.stream._windows.iter_windows`."""
        from vault.stream._windows import iter_windows

        known_options("iter_windows", options, iter_windows)
        return iter_windows(self.snapshot, window, **options)

    # ----------------------------------------------------------------------------- writing
    def _writer_for_write(self) -> Writer:
        if self._closed:
            raise VaultModeError(f"{self.location}: this Vault was closed")
        if self._mode != "a":
            raise VaultModeError(f"{self.location} is open read-only; open it with mode='a'")
        return self._take_writer()

    def write(
        self,
        state: Any,
        *,
        on_overrun: OnOverrun = "error",
        new_buffer: bool = False,
        block: bool = True,
    ) -> int:
        """Append the timesteps added to ``state`` since the previous write; return how many.

        Writes go by the buffer's write counter, which the commit record keeps: after
        :meth:`open` the first write checks that the buffer still holds the vault's last
        timestep where its counter says, so a different buffer is refused
        (:class:`VaultStructureError`) unless ``new_buffer=True``, which appends all it holds
        and is safe on every write (never a timestep twice). ``Vault(name, ...)`` acts as if
        always given it, like the reference, except that the buffer it wrote last, overrun,
        is an overrun (below). A write never stores less than is new silently.

        If more timesteps were added since the last write than the buffer holds,
        the oldest unsaved ones are gone: :class:`UnsavedDataLostError` (vault unchanged), or
        with ``on_overrun="save_surviving"`` the surviving ones are saved and the loss recorded
        as a seam (:attr:`seams`).

        With ``block=False`` the call returns once the fresh timesteps have been copied out of
        the buffer into host memory (so the buffer may be donated or overwritten at once);
        compression, disk I/O and the commit continue on a background thread, in order. At
        most ``max_pending`` writes wait there (then the call blocks: back-pressure).
        :meth:`flush`, :meth:`close` and leaving a ``with`` block wait for them; an error in
        the background is raised by the next ``write``/``flush``/``close``, and nothing after
        the failed write is committed.
        """
        writer = self._writer_for_write()
        return writer.write(state, on_overrun=on_overrun, new_buffer=new_buffer, block=block)

    def append(self, experience: Any, *, continues: bool = True) -> int:
        """Append timesteps given directly as arrays ``[rows, n, ...]`` (numpy or JAX), in
        the vault's structure; returns ``n``. For data that does not come from a buffer (a
        Gymnasium loop, another dataset). ``continues=False`` says the rows do not continue
        their open episodes: those are dropped from the index and new ones start here (a
        seam is recorded).

        Blocking; it forgets the buffer write counter, so a later ``write(state)`` saves all
        that buffer holds (as with ``new_buffer=True``).
        """
        writer = self._writer_for_write()
        return writer.append(experience, None if continues else np.ones(self.rows, bool))

    def flush(self) -> None:
        """Wait until every write has been committed; raise a background error if one failed."""
        if self._writer is not None:
            self._writer.flush()


def vault_of_writer(writer: Writer) -> Vault:
    """A :class:`Vault` (mode ``"a"``) over ``writer``, e.g. of a vault being built in staging
    whose manifest is published at the end."""
    vault = Vault.__new__(Vault)
    vault._setup(writer.snapshot, "a", writer)
    return vault


def vault_of_snapshot(snap: Snapshot) -> Vault:
    """A read-only :class:`Vault` at ``snap`` (e.g. a dataset's shard, opened from records the
    dataset has read); :meth:`Vault.refresh` moves it on as usual."""
    vault = Vault.__new__(Vault)
    vault._setup(snap, "r", None)
    return vault


def _reference_vault(target: ReferenceTarget, metadata: dict[str, Any] | None) -> Vault:
    """The Vault that ``Vault(name, ...)`` makes of ``target`` (``vault/facade/_compat.py``)."""
    if target.create:
        vault = Vault.create(
            target.location,
            target.structure,
            rows=target.rows,
            codec=target.codec,
            level=target.level,
            metadata=metadata,
        )
    else:
        # As the reference: open for reading and writing; the writer lock is taken by the
        # first write, so that reopening a vault to read it does not need the lock.
        vault = Vault._open(target.location, "a", lazy_lock=True)
    # As the reference, which tracks what it received per Vault object: a buffer this object
    # has not written yet is appended whole (unless it is the very buffer the vault was last
    # written from, which continues where it stopped).
    vault._adopt_buffers = True
    if vault._writer is not None:
        vault._writer.adopt_buffers = True
    return vault
