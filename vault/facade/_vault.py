"""The Vault: a facade over the pieces that store buffer states as Zarr v3 arrays.

``Vault.create`` / ``Vault.open`` / ``Vault(...)`` (the reference-style constructor) give a
vault at a location (``vault/storage/_location.py``). Reads work on an immutable snapshot of the
latest commit (``vault/commits/_snapshot.py``, ``vault/read/_read.py``; the reading, writing,
episode and commit methods are mixed in from ``_reading.py``, ``_writing.py``, ``_episodes.py``
and ``_commit_info.py``); writes go through the vault's one writer (``vault/write/_writer.py``:
planning, the commit protocol, background queue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from vault._args import int_arg
from vault._errors import VaultArgumentError, VaultModeError
from vault.commits._pins import Pin, at_pin
from vault.commits._snapshot import Snapshot, load_snapshot, reopen
from vault.facade._commit_info import CommitMethods
from vault.facade._compat import ReferenceTarget, reference_target
from vault.facade._episodes import EpisodeMethods
from vault.facade._reading import ReadMethods
from vault.facade._writing import WriteMethods
from vault.format._records import Manifest
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import LockHolder
from vault.write._create import create_vault, plan_manifest
from vault.write._writer import Writer

if TYPE_CHECKING:
    pass


class Vault(EpisodeMethods, ReadMethods, WriteMethods, CommitMethods):
    """A dataset of timesteps ``[rows, time, ...]`` per leaf, appended from buffer states.

    Create with :meth:`Vault.create`, open with :meth:`Vault.open`. ``Vault(name, ...)`` is the
    reference's (Flashbax's) constructor: it opens ``rel_dir/vault_name/vault_uid``, or creates it.

    Args:
        vault_name: the vault's name (a folder under ``rel_dir``).
        experience_structure: a buffer state's experience (or a state), to create the vault
            from; ``None`` to open an existing one.
        rel_dir: the folder (or location) that holds the vaults.
        vault_uid: the vault's folder under the name (default: the latest one when opening,
            a new timestamp when creating).
        compression: the reference's ``{"id": ..., "level": ...}``, mapped to a codec.
        metadata: user metadata stored with the vault (JSON).
        storage: object-store settings, as in :meth:`create`.

    Raises:
        VaultNotFoundError: nothing to open and no ``experience_structure`` to create from.
        VaultLockedError: another writer holds the vault.
        VaultArgumentError: a ``vault_name`` or ``vault_uid`` that does not name a folder
            under ``rel_dir``.
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
            VaultArgumentError: a ``vault_name`` or ``vault_uid`` that does not name a
                folder under ``rel_dir``.
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

        Every argument is checked before anything is written.

        Args:
            location: a path, a ``file://``, ``memory://`` or ``s3://bucket/prefix`` URL, or a
                TensorStore kvstore spec; it must be empty or absent.
            structure_or_state: a buffer state (rows and per-timestep shapes are taken from
                it; ours, or one in the reference's shape: a Flashbax state or the dict orbax
                restores from its checkpoint) or one example timestep (a pytree of arrays)
                with ``rows`` given.
            rows: rows of the vault, when ``structure_or_state`` is one timestep.
            codec: ``"auto"`` (zstd-3 for one-byte leaves such as frames, shuffled
                blosc-zstd-1 for wider numbers), ``"zstd"``, ``"blosc"``, ``"lz4"``,
                ``"gzip"`` or ``None``; every chunk also gets a ``crc32c`` checksum.
            level: the codec's compression level (default: the codec's).
            chunk: leaf path -> chunk shape ``[rows, time, ...]``, to override the default
                (whole frames x about 2 MiB of timesteps per row for large items, all rows x
                about 256 KiB for small ones).
            metadata: user metadata, stored as JSON.
            done_leaf: the leaf path (such as ``"done"``) of episode-end flags; turns on the
                episode index (see :meth:`episodes`).
            truncated_leaf: the leaf path of truncation flags (with ``done_leaf``).
            reward_leaf: the leaf path of rewards, for episode returns (with ``done_leaf``).
            storage: object-store settings over the AWS environment variables
                (``endpoint``, ``region``, ``access_key_id``, ``retries``, ...).

        Returns:
            The new vault, open for appending (it holds the writer lock until :meth:`close`).

        Raises:
            VaultExistsError: the location holds a vault or other data (named).
            VaultStructureError: a leaf that cannot be stored, or an episode leaf
                (``done_leaf``, ...) that is not one of its leaves (every bad one listed).
            VaultMetadataError: metadata that JSON would change or refuse (a non-string key,
                a tuple, NaN, a numpy scalar), naming its key path.
            VaultArgumentError: an unknown codec or a bad chunk shape.

        Examples:
            >>> import numpy as np
            >>> from vault import Vault
            >>> example = {"obs": np.zeros(3, np.float32), "done": np.bool_(False)}
            >>> data = {"obs": np.ones((2, 5, 3), np.float32), "done": np.zeros((2, 5), bool)}
            >>> with Vault.create("runs/doc", example, rows=2, done_leaf="done") as v:
            ...     v.append(data)
            5
            >>> Vault.open("runs/doc").committed_length
            5
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
        """Open an existing vault, to read it or to append to it.

        Args:
            location: as in :meth:`create`.
            mode: ``"r"``: read-only, no lock (any number of readers); ``"a"``: append (takes
                the writer lock).
            at: read the vault as it was at a commit (its number, its id such as
                ``"12-3f9a0c1b2d4e"`` from :attr:`commit_id`, or a tag): every read, stream
                and table sees exactly that commit's data, in any process, after any number of
                later appends (``"r"`` only).
            storage: as in :meth:`create`.

        Returns:
            The vault at its latest commit (or at ``at``).

        Raises:
            VaultNotFoundError: no vault at the location.
            VaultLockedError: ``"a"`` and another writer holds the lock (named).
            VaultPinError: the vault cannot serve ``at`` (never a different commit's data).
            VaultVersionError: the vault was written by a newer rlvault.
            VaultCorruptError: the manifest or commit record failed validation.
            VaultArgumentError: a ``mode`` other than ``"r"`` and ``"a"``, or ``at`` with
                ``mode="a"``.
        """
        if at is not None and mode != "r":
            raise VaultArgumentError(f"at= pins a commit for reading: use mode='r', not {mode!r}")
        vault = cls._open(parse_location(location, storage), mode, lazy_lock=False)
        if at is not None:
            vault._snap, vault._pinned = at_pin(vault._snap, at), True
        return vault

    @classmethod
    def _open(cls, location: LocationLike, mode: str, lazy_lock: bool) -> Vault:
        if not isinstance(mode, str) or mode not in ("r", "a"):
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
                self._writer = Writer(reopen(self._snap), lock)
            except BaseException:
                lock.release()
                raise
            self._writer.max_pending = self._max_pending
            self._writer.adopt_buffers = self._adopt_buffers
        return self._writer

    def refresh(self) -> int:
        """Re-read the commit record, to see appends made by another process since.

        On a writer it first waits for its pending writes (its own commits are the truth); a
        pinned vault (``at=``) stays at its commit.

        Returns:
            The committed length after the refresh.
        """
        if self._writer is not None:
            self._writer.refresh()
        elif not self._pinned:  # a pinned vault stays at its commit
            self._snap = self._snap.refreshed()
        return self.committed_length

    def close(self) -> None:
        """Wait for pending writes, then release the writer lock (if held).

        Reading methods keep working; writes do not.

        Raises:
            VaultError: a background write failed (nothing after it was committed).
        """
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
        """The vault's location, as a path or URL."""
        return str(self._snap.location)

    @property
    def committed_length(self) -> int:
        """Committed timesteps per row."""
        return self.snapshot.length

    vault_index = committed_length
    """The reference's name for :attr:`committed_length`."""

    @property
    def pinned(self) -> bool:
        """Whether this Vault was opened at a commit (``Vault.open(..., at=...)``): it reads
        that commit, :meth:`refresh` keeps it there, and :func:`vault.verify` of it checks
        that commit."""
        return self._pinned

    @property
    def rows(self) -> int:
        """Rows of the vault (the buffer's ``add_batch_size``)."""
        return self._snap.rows

    @property
    def leaf_names(self) -> list[str]:
        """Every leaf's path (``"obs"``, ``"info/x"``), in the structure's leaf order (a
        dict's keys sorted, a tuple's or named tuple's fields in order: the order
        ``jax.tree_util`` flattens it in)."""
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
    def max_pending(self) -> int:
        """Non-blocking writes that may wait in the background before ``write`` blocks."""
        return self._max_pending

    @max_pending.setter
    def max_pending(self, value: int) -> None:
        self._max_pending = int_arg("max_pending", value, 1)
        if self._writer is not None:
            self._writer.max_pending = self._max_pending

    def lock_holder(self) -> LockHolder | None:
        """Who holds this vault's writer lock now.

        Returns:
            The holder (process, host, since when), or ``None`` when nobody holds it or
            the location cannot tell.
        """
        return self._snap.location.lock_holder()

    # ----------------------------------------------------------------------------- writing
    def _writer_for_write(self) -> Writer:
        if self._closed:
            raise VaultModeError(f"{self.location}: this Vault was closed")
        if self._mode != "a":
            raise VaultModeError(f"{self.location} is open read-only; open it with mode='a'")
        return self._take_writer()


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
