"""The Vault: appends only the unseen timesteps of a buffer state to Zarr v3 arrays.

Commit protocol (shared/DESIGN.md, Vault invariant 2): data chunks of every leaf are written
and awaited first; then the commit record (``commit/zarr.json``: committed length, the
buffer's write counter, a sequence number, the episode-index state) is replaced atomically.
Readers never look past the committed length, so after a crash the vault shows exactly the last
committed prefix and the next append overwrites any partial tail. Old versions of the files an
append replaces are freed off the write path (``vault/_reclaim.py``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import datetime as _dt
import functools
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import tensorstore as ts

from vault import _structure
from vault._episodes import (
    BOUNDS,
    FLAG_START_UNKNOWN,
    INDEX_CHUNK,
    RETURNS,
    EpisodeTable,
    advance,
    index_metadata,
    initial_open,
    open_table,
)
from vault._errors import (
    UnsavedDataLostError,
    VaultCorruptError,
    VaultError,
    VaultExistsError,
    VaultMetadataError,
    VaultModeError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
)
from vault._location import display, kvstore_spec
from vault._lock import WriterLock
from vault._reclaim import Reclaimer
from vault._schema import FILL_CHUNKS_KEY
from vault._store import (
    COMMIT_KEY,
    EXPERIENCE,
    FORMAT_VERSION,
    MANIFEST_KEY,
    array_metadata,
    auto_codec,
    choose_chunk,
    codec_chain,
    create_array,
    group_json,
    load_manifest,
    open_array,
    read_commit,
    write_commit,
)

OnOverrun = Literal["error", "save_surviving"]
READ_BLOCK_BYTES = 4 << 20  # raw bytes of one read of one leaf
READ_INFLIGHT_MIN = 8 << 20  # raw bytes of the reads in flight at once: an eighth of the
READ_INFLIGHT_MAX = 64 << 20  # read, within these bounds


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype, zero: bool = False) -> np.ndarray:
    """A 64-byte-aligned numpy array: ``jax.device_put`` adopts such a buffer on CPU without a
    copy, so a read handed to JAX costs no second copy of the data."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    raw = (np.zeros if zero else np.empty)(nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rlvault")
    except Exception:
        return "unknown"


class _Tip(NamedTuple):
    """Where the next append goes: after every write issued so far (committed or pending)."""

    committed_length: int
    source_counter: int | None
    gaps: list[dict[str, int]]


class _Snapshot:
    """What ``write`` needs from a buffer state: experience, indices, counter, stacking."""

    def __init__(self, state: Any) -> None:
        if not hasattr(state, "experience") or not hasattr(state, "write_counter"):
            raise VaultStructureError(
                f"write() takes a buffer state from `buffers` (with `experience` and "
                f"`write_counter`), got {type(state).__name__}"
            )
        from buffers import timesteps_added

        current = np.asarray(state.current_index if hasattr(state, "current_index") else 0)
        self.stack = current.ndim  # leading device/vmap axes folded into rows
        if self.stack and (np.any(current != current.flat[0])):
            raise VaultStructureError(
                "stacked (pmap/vmap) state whose parts are at different time positions: "
                f"current_index={current.tolist()}"
            )
        counter = timesteps_added(state)
        counters = np.atleast_1d(np.asarray(counter, dtype=object))
        if any(c != counters[0] for c in counters):
            raise VaultStructureError(f"stacked state with different write counters {counter}")
        self.counter = int(counters[0])
        self.current = int(current.flat[0]) if current.size else 0
        full = np.asarray(state.is_full)
        self.full = bool(full.flat[0])
        self.experience = state.experience
        first = _first_leaf(state.experience)
        self.time_len = int(first.shape[self.stack + 1])
        self.rows = int(math.prod(first.shape[: self.stack + 1]))

    @property
    def held(self) -> int:
        return self.time_len if self.full else self.current

    def leaf(self, value: Any) -> np.ndarray:
        arr = np.asarray(value)
        return arr.reshape((self.rows, self.time_len, *arr.shape[self.stack + 2 :]))


class _Arrays:
    """Experience given as arrays ``[rows, n, ...]``: what ``append`` checks and writes."""

    stack = 0

    def __init__(self, experience: Any) -> None:
        first = _first_leaf(experience)
        if len(first.shape) < 2:
            raise VaultStructureError(
                f"append() takes leaves shaped [rows, time, ...], got shape {tuple(first.shape)}"
            )
        self.experience = experience
        self.rows = int(first.shape[0])
        self.time_len = int(first.shape[1])


def _check_episode_leaves(
    episodes: dict[str, str | None], names: list[str], values: list[Any], skip: int
) -> dict[str, Any] | None:
    """The manifest's ``episodes`` entry, or None; every named leaf must be a scalar leaf."""
    if episodes.get("done") is None:
        extra = [k for k, v in episodes.items() if v is not None]
        if extra:
            raise VaultStructureError(f"{extra} given without done_leaf: give done_leaf too")
        return None
    problems = []
    for role, name in episodes.items():
        if name is None:
            continue
        if name not in names:
            problems.append(f"{role}_leaf {name!r}: no such leaf; leaves: {names}")
            continue
        shape = tuple(values[names.index(name)].shape[skip:])
        if shape:
            problems.append(f"{role}_leaf {name!r}: expected one value per timestep, got {shape}")
    if problems:
        raise VaultStructureError("bad episode leaves", problems)
    return dict(episodes)


def _timestep_of(experience: Any) -> tuple[Any, int]:
    """One timestep (``x[0, 0]`` of every leaf) and the row count of a ``[B, T, ...]`` tree."""
    import jax

    first = _first_leaf(experience)
    if len(first.shape) < 2:
        raise VaultStructureError(
            f"experience_structure leaves must be [rows, time, ...], got shape {first.shape}"
        )
    return jax.tree.map(lambda x: x[0, 0], experience), int(first.shape[0])


def _first_leaf(tree: Any) -> Any:
    import jax

    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise VaultStructureError("the experience has no array leaves")
    return leaves[0]


class Vault:
    """A dataset of timesteps ``[rows, time, ...]`` per leaf, appended from buffer states.

    Create with :meth:`Vault.create`, open with :meth:`Vault.open`; ``Vault(name, ...)``
    behaves like the reference's constructor (opens if present, else creates).
    """

    def __init__(
        self,
        vault_name: str,
        experience_structure: Any = None,
        rel_dir: str = "vaults",
        vault_uid: str | None = None,
        compression: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        base = Path(rel_dir) / vault_name
        if vault_uid is None:
            existing = sorted(p.name for p in base.glob("*") if (p / MANIFEST_KEY).exists())
            vault_uid = existing[-1] if existing and experience_structure is None else None
        if vault_uid is None:
            vault_uid = _dt.datetime.now().strftime("%Y%m%d%H%M%S")
        location = base / vault_uid
        if (location / MANIFEST_KEY).exists():
            # As the reference: open for reading and writing; the writer lock is taken by the
            # first write, so that reopening a vault to read it does not need the lock.
            self._init_open(str(location), "a", lazy_lock=True)
        else:
            if experience_structure is None:
                raise VaultNotFoundError(
                    f"no vault at {location}: give `experience_structure` (a buffer state) to "
                    "create one"
                )
            codec, level = _compat_compression(compression)
            rows = None
            if not hasattr(experience_structure, "experience"):
                # The reference passes ``state.experience``: leaves ``[B, T, ...]``.
                experience_structure, rows = _timestep_of(experience_structure)
            other = Vault.create(
                str(location),
                experience_structure,
                rows=rows,
                codec=codec,
                level=level,
                metadata=metadata,
            )
            self.__dict__.update(other.__dict__)

    # ----------------------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls,
        location: str,
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
    ) -> Vault:
        """Create an empty vault at ``location`` shaped like a buffer state.

        ``structure_or_state`` is a buffer state (rows and per-timestep shapes are taken from
        it) or one example timestep with ``rows`` given. ``codec``: ``"auto"`` (default:
        zstd-3 for one-byte leaves such as frames, shuffled blosc-zstd-1 for wider numbers),
        ``"zstd"``, ``"blosc"``, ``"lz4"`` (blosc-lz4: faster to encode, but 3.4x instead of
        zstd-3's 13.8x on Atari-like frames, and no cheaper for a training loop in
        ``tools/bench_recording.py``), ``"gzip"`` or ``None``; every chunk also gets a
        ``crc32c`` checksum. ``level`` sets the compression level.
        ``chunk`` maps leaf paths to chunk shapes ``[rows, time, ...]`` to override the
        default (whole frames x about 2 MiB of timesteps per row for large items, all rows x
        about 256 KiB for small ones).
        ``done_leaf`` (a leaf path such as ``"done"``; optionally ``truncated_leaf`` and
        ``reward_leaf``) turns on the episode index: see :meth:`episodes`.
        """
        root = kvstore_spec(location)
        ctx = _context(root)
        kv = ts.KvStore.open(root, context=ctx).result()
        if kv.read(MANIFEST_KEY).result().state == "value":
            raise VaultExistsError(f"a Zarr node already exists at {display(root)}")
        if root["driver"] == "file":
            Path(root["path"]).mkdir(parents=True, exist_ok=True)
        lock = WriterLock(root, display(root))
        episodes = {"done": done_leaf, "truncated": truncated_leaf, "reward": reward_leaf}
        try:
            return cls._create_locked(
                root,
                ctx,
                kv,
                lock,
                structure_or_state,
                rows,
                codec,
                level,
                chunk,
                metadata,
                episodes,
            )
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _create_locked(
        cls,
        root: dict[str, Any],
        ctx: Any,
        kv: Any,
        lock: WriterLock,
        structure_or_state: Any,
        rows: int | None,
        codec: str | None,
        level: int | None,
        chunk: dict[str, Sequence[int]] | None,
        metadata: dict[str, Any] | None,
        episodes: dict[str, str | None],
    ) -> Vault:
        if kv.read(MANIFEST_KEY).result().state == "value":  # created by the lock's holder
            raise VaultExistsError(f"a Zarr node already exists at {display(root)}")
        user = _check_metadata(metadata)
        if hasattr(structure_or_state, "experience"):
            snap = _Snapshot(structure_or_state)
            example, n_rows, skip = snap.experience, snap.rows, snap.stack + 2
        else:
            if rows is None:
                raise VaultStructureError("give `rows` when creating from a single timestep")
            example, n_rows, skip = structure_or_state, int(rows), 0
        node = _structure.describe(example)
        names = _structure.leaf_names(node)
        values = _structure.leaves(example, node)
        if codec != "auto":
            codec_chain(codec, level)  # validate the name before anything is created
        episodes_meta = _check_episode_leaves(episodes, names, values, skip)
        unsupported = [
            f"experience/{name}: dtype {np.dtype(value.dtype).name} is not supported (bool, "
            "integer and floating-point leaves are)"
            for name, value in zip(names, values, strict=True)
            if np.dtype(getattr(value, "dtype", np.asarray(value).dtype)).kind not in "biuf"
        ]
        if unsupported:
            raise VaultStructureError("leaves of unsupported dtypes", unsupported)
        chunk = dict(chunk or {})
        unknown = sorted(set(chunk) - set(names))
        if unknown:
            raise VaultStructureError(f"`chunk` names unknown leaves {unknown}; leaves: {names}")
        leaves_meta = []
        futures = []
        for name, value in zip(names, values, strict=True):
            arr = np.asarray(value) if not hasattr(value, "dtype") else value
            item_shape = tuple(int(d) for d in arr.shape[skip:])
            dtype = np.dtype(arr.dtype)
            chunk_shape = list(chunk.get(name) or choose_chunk(n_rows, item_shape, dtype))
            leaves_meta.append(
                {"name": name, "shape": list(item_shape), "dtype": dtype.name, "chunk": chunk_shape}
            )
            chosen = auto_codec(dtype) if codec == "auto" else (codec, level)
            codecs = codec_chain(*chosen)
            leaves_meta[-1]["codecs"] = codecs
            meta = array_metadata(n_rows, item_shape, dtype, chunk_shape, codecs)
            futures.append(create_array(root, f"{EXPERIENCE}/{name}", meta, ctx))
        if episodes_meta is not None:
            futures += [create_array(root, BOUNDS, index_metadata("bounds"), ctx)]
            futures += [create_array(root, RETURNS, index_metadata("returns"), ctx)]
            kv.write(f"episodes/{MANIFEST_KEY}", group_json()).result()
        for fut in futures:
            fut.result()
        for group in _group_paths(names):
            kv.write(
                f"{EXPERIENCE}/{group}/{MANIFEST_KEY}".replace("//", "/"), group_json()
            ).result()
        kv.write(f"{EXPERIENCE}/{MANIFEST_KEY}", group_json()).result()
        manifest = {
            "format_version": FORMAT_VERSION,
            "rlvault_version": _version(),
            "created": _dt.datetime.now(_dt.UTC).isoformat(),
            "rows": n_rows,
            "structure": node,
            "leaves": leaves_meta,
            "user_metadata": user,
            FILL_CHUNKS_KEY: True,
        }
        commit: dict[str, Any] = {"committed_length": 0, "source_counter": None, "seq": 0}
        commit["gaps"] = []
        if episodes_meta is not None:
            manifest["episodes"] = episodes_meta
            commit["episodes"] = {"count": 0, "open": initial_open(n_rows)}
        write_commit(kv, commit)
        kv.write(MANIFEST_KEY, group_json({"rlvault": manifest})).result()
        vault = cls.__new__(cls)
        vault._setup(root, ctx, kv, manifest, "a", lock)
        return vault

    @classmethod
    def open(cls, location: str, mode: Literal["r", "a"] = "r") -> Vault:
        """Open an existing vault, read-only (``"r"``, no lock: any number of readers) or for
        appending (``"a"``: takes the writer lock, :class:`VaultLockedError` if held)."""
        vault = cls.__new__(cls)
        vault._init_open(location, mode)
        return vault

    def _init_open(self, location: str, mode: str, lazy_lock: bool = False) -> None:
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', got {mode!r}")
        root = kvstore_spec(location)
        ctx = _context(root)
        kv = ts.KvStore.open(root, context=ctx).result()
        manifest = load_manifest(kv, root)
        lock = WriterLock(root, display(root)) if mode == "a" and not lazy_lock else None
        try:
            self._setup(root, ctx, kv, manifest, mode, lock)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    def _setup(
        self,
        root: dict[str, Any],
        ctx: Any,
        kv: Any,
        manifest: dict[str, Any],
        mode: str,
        lock: WriterLock | None,
    ) -> None:
        self._lock = lock
        self._closed = False
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque[Any] = collections.deque()
        self._background_error: BaseException | None = None
        self.max_pending = 2
        self._root, self._ctx, self._kv, self._manifest, self._mode = root, ctx, kv, manifest, mode
        self._names = [leaf["name"] for leaf in manifest["leaves"]]
        self._chunk_time = {leaf["name"]: leaf["chunk"][1] for leaf in manifest["leaves"]}
        self._reclaimer: Reclaimer | None = None
        futures = [open_array(root, f"{EXPERIENCE}/{n}", ctx, mode == "r") for n in self._names]
        self._arrays = [f.result() for f in futures]
        self._episode_cfg: dict[str, Any] | None = manifest.get("episodes")
        self._index: list[Any] = []
        if self._episode_cfg is not None:
            futures = [open_array(root, key, ctx, mode == "r") for key in (BOUNDS, RETURNS)]
            self._index = [f.result() for f in futures]
        self._commit: dict[str, Any] = {}
        self.refresh()

    def refresh(self) -> int:
        """Re-read the commit record (see appends by another process); returns the length.

        On a writer it first waits for its pending writes (its own commits are the truth)."""
        if self._pending:
            self.flush()
        doc = read_commit(self._kv, self._root)
        if doc is None or not isinstance(doc.get("committed_length"), int):
            raise VaultCorruptError(f"{self.location}: missing or invalid {COMMIT_KEY}")
        self._commit = doc
        self._tip = _Tip(
            int(doc["committed_length"]), doc.get("source_counter"), list(doc.get("gaps", []))
        )
        stale = [i for i, a in enumerate(self._arrays) if a.shape[1] < self.committed_length]
        read_only = self._mode == "r"
        resolved = [
            (i, open_array(self._root, f"{EXPERIENCE}/{self._names[i]}", self._ctx, read_only))
            for i in stale
        ]  # another process grew these arrays: reopen to see their new shape
        for i, fut in resolved:
            self._arrays[i] = fut.result()
        count = self._episode_count()
        if self._index and self._index[0].shape[0] < count:
            futures = [open_array(self._root, k, self._ctx, read_only) for k in (BOUNDS, RETURNS)]
            self._index = [f.result() for f in futures]
        return self.committed_length

    # ----------------------------------------------------------------------------- properties
    @property
    def location(self) -> str:
        return display(self._root)

    @property
    def committed_length(self) -> int:
        """Committed timesteps per row."""
        return int(self._commit["committed_length"])

    vault_index = committed_length

    @property
    def rows(self) -> int:
        return int(self._manifest["rows"])

    @property
    def leaf_names(self) -> list[str]:
        return list(self._names)

    @property
    def metadata(self) -> dict[str, Any]:
        """User metadata given at creation (reserved keys live elsewhere in the manifest)."""
        return dict(self._manifest.get("user_metadata", {}))

    @property
    def manifest(self) -> dict[str, Any]:
        return dict(self._manifest)

    @property
    def gaps(self) -> list[dict[str, int]]:
        """The seams of the data: ``{"at": t, "lost": n}`` says the timesteps at ``t - 1`` and
        ``t`` are not consecutive. ``n > 0``: ``n`` timesteps per row were lost there
        (``on_overrun="save_surviving"``); ``n == 0``: the rows restarted there
        (``append(..., continues=False)``, the seams of :func:`~vault.combine`). Streams never
        cut a sequence across a seam, and no episode runs across one."""
        return list(self._commit.get("gaps", []))

    # ----------------------------------------------------------------------------- episodes
    @property
    def has_episodes(self) -> bool:
        """Whether this vault keeps an episode index (created with ``done_leaf``)."""
        return self._episode_cfg is not None

    @property
    def episode_leaves(self) -> dict[str, str | None]:
        """The leaves that delimit episodes: ``{"done", "truncated", "reward"}`` -> path."""
        cfg = self._episode_cfg or {}
        return {k: cfg.get(k) for k in ("done", "truncated", "reward")}

    def _episode_count(self) -> int:
        episodes = self._commit.get("episodes")
        return int(episodes["count"]) if episodes else 0

    def episodes(self, include_open: bool = False) -> EpisodeTable:
        """The committed episode index (loaded from the index arrays, no scan of the data).

        Complete episodes in the order they were committed (by write, then row, then time);
        with ``include_open`` the unfinished last episode of every row is appended
        (``complete`` false, its length and return so far).
        """
        if self._episode_cfg is None:
            raise VaultReadError(
                f"{self.location} has no episode index: create the vault with "
                "done_leaf=... (and optionally truncated_leaf=, reward_leaf=) to keep one"
            )
        count = self._episode_count()
        has_reward = self._episode_cfg.get("reward") is not None
        if count:
            bounds = self._result(self._index[0][:count].read(), "bounds", "episodes")
            returns = self._result(self._index[1][:count].read(), "returns", "episodes")
            table = EpisodeTable.from_bounds(bounds, returns, has_reward)
        else:
            table = EpisodeTable.empty()
        if include_open:
            opened = open_table(self._commit["episodes"]["open"], self.committed_length, has_reward)
            table = EpisodeTable.concat([table, opened])
        return table

    def read_episode(
        self, episode: int | EpisodeTable, *, leaves: Sequence[str] | None = None
    ) -> Any:
        """One episode's timesteps: the vault's structure with leaves ``[length, ...]``.

        ``episode`` is a position in :meth:`episodes` or a one-row :class:`EpisodeTable`.
        """
        if isinstance(episode, EpisodeTable):
            if len(episode) != 1:
                raise VaultReadError(f"read_episode takes one episode, got {len(episode)}")
            row, start, length = int(episode.row[0]), int(episode.start[0]), int(episode.length[0])
        else:
            table = self.episodes()
            if not -len(table) <= int(episode) < len(table):
                raise VaultReadError(
                    f"{self.location}: episode {episode} out of range; {len(table)} complete "
                    "episodes are committed"
                )
            one = table[int(episode)]
            row, start, length = int(one.row[0]), int(one.start[0]), int(one.length[0])
        data = self.read_numpy(rows=[row], start=start, stop=start + length, leaves=leaves)
        import jax

        return jax.tree.map(lambda x: x[0], data)

    def iter_episodes(
        self, table: EpisodeTable | None = None, *, leaves: Sequence[str] | None = None
    ) -> Iterator[Any]:
        """Yield every episode of ``table`` (default: all complete ones) as ``read_episode``."""
        chosen = self.episodes() if table is None else table
        for i in range(len(chosen)):
            yield self.read_episode(chosen[i], leaves=leaves)

    # ----------------------------------------------------------------------------- streaming
    def as_dataset(self, sample_batch_size: int, sequence_length: int, **options: Any) -> Any:
        """Batches of sequences streamed from disk with background prefetch, for vaults larger
        than memory; see :func:`vault._stream.as_dataset` for the options (``shuffle``,
        ``seed``, ``prefetch``, ``episode_aware``, ``stride``, ``epochs``, ...)."""
        from vault._stream import as_dataset

        return as_dataset(self, sample_batch_size, sequence_length, **options)

    def iter_windows(self, window: int, **options: Any) -> Any:
        """Successive (optionally shuffled) windows of ``window`` timesteps as trajectory-buffer
        states, read ahead in the background; see :func:`vault._stream.iter_windows`."""
        from vault._stream import iter_windows

        return iter_windows(self, window, **options)

    # ----------------------------------------------------------------------------- writing
    def append(self, experience: Any, *, continues: bool = True) -> int:
        """Append timesteps given directly as arrays ``[rows, n, ...]`` (numpy or JAX), in
        the vault's structure; returns ``n``. For data that does not come from a buffer (a
        Gymnasium loop, another dataset). ``continues=False`` says the rows do not continue
        their open episodes: those are dropped from the index and new ones start here.

        Blocking; it forgets the buffer write counter, so a later ``write(state)`` saves all
        that buffer holds (as with ``new_buffer=True``).
        """
        return self._append_arrays(experience, None if continues else np.ones(self.rows, bool))

    def _append_arrays(self, experience: Any, restart: np.ndarray | None, lost: int = 0) -> int:
        """``append`` with, per row, whether a new episode starts here with a known start
        (``restart``; None: continue the open episodes), after ``lost`` lost timesteps (a gap
        is recorded)."""
        self._check_writable()
        self.flush()
        snap = _Arrays(experience)
        values = self._check_state(snap)  # type: ignore[arg-type]
        parts = [np.asarray(v) for v in values]
        n = snap.time_len
        begin = self._tip.committed_length
        gaps = list(self._tip.gaps)
        if lost or (restart is not None and begin > 0):
            # a seam: the timesteps on either side are not consecutive (``lost`` 0: a restart)
            if gaps and int(gaps[-1]["at"]) == begin:
                gaps[-1] = {"at": begin, "lost": int(gaps[-1]["lost"]) + int(lost)}
            else:
                gaps.append({"at": begin, "lost": int(lost)})
        if lost:
            restart = np.zeros(self.rows, bool)
        job = functools.partial(
            self._append, begin, begin + n, parts if n else [], None, gaps, False, restart
        )
        self._run_now(job)
        self._tip = _Tip(begin + n, None, gaps)
        return n

    def _check_writable(self) -> None:
        self._raise_background_error()
        if self._closed:
            raise VaultModeError(f"{self.location}: this Vault was closed")
        if self._mode != "a":
            raise VaultModeError(f"{self.location} is open read-only; open it with mode='a'")
        if self._lock is None:
            self._lock = WriterLock(self._root, self.location)

    def write(
        self,
        state: Any,
        *,
        on_overrun: OnOverrun = "error",
        new_buffer: bool = False,
        block: bool = True,
    ) -> int:
        """Append the timesteps added to ``state`` since the previous write; return how many.

        The first write of a vault (or with ``new_buffer=True``) saves every timestep the
        buffer holds. If more timesteps were added since the last write than the buffer holds,
        the oldest unsaved ones are gone: :class:`UnsavedDataLostError` (vault unchanged), or
        with ``on_overrun="save_surviving"`` the surviving ones are saved and the gap recorded
        in :attr:`gaps`.

        With ``block=False`` the call returns once the fresh timesteps have been copied out of
        the buffer into host memory (so the buffer may be donated or overwritten at once);
        compression, disk I/O and the commit continue on a background thread, in order. At
        most ``max_pending`` writes wait there (then the call blocks: back-pressure).
        :meth:`flush`, :meth:`close` and leaving a ``with`` block wait for them; an error in
        the background is raised by the next ``write``/``flush``/``close``, and nothing after
        the failed write is committed.
        """
        self._check_writable()
        if on_overrun not in ("error", "save_surviving"):
            raise ValueError(f"on_overrun must be 'error' or 'save_surviving', got {on_overrun!r}")
        snap = _Snapshot(state)
        values = self._check_state(snap)
        tip = self._tip
        source = tip.source_counter
        if source is None or new_buffer:
            unsaved = snap.held
        else:
            if snap.counter < source:
                raise VaultStructureError(
                    f"{self.location}: the buffer's write counter ({snap.counter}) is behind the "
                    f"vault's record of it ({source}): this is not the buffer this vault was "
                    "written from. Pass new_buffer=True to append everything it holds."
                )
            unsaved = snap.counter - source
        gaps = list(tip.gaps)
        if unsaved > snap.held:
            lost = unsaved - snap.held
            if on_overrun == "error":
                raise UnsavedDataLostError(
                    f"{self.location}: {unsaved} timesteps per row were added since the last "
                    f"write but the buffer holds {snap.held}; {lost} were overwritten before "
                    "being saved. Nothing was written. Write more often (at least every "
                    f"{snap.time_len} timesteps) or pass on_overrun='save_surviving'.",
                    lost,
                )
            gaps.append({"at": tip.committed_length, "lost": lost})
            unsaved = snap.held
        if unsaved == 0 and snap.counter == source:
            return 0
        begin = tip.committed_length
        end = begin + unsaved
        start = (snap.current - unsaved) % snap.time_len
        stop = start + unsaved
        parts = []
        for value in values if unsaved else ():
            data = snap.leaf(value)
            if stop <= snap.time_len:
                # A view is enough when we wait for the write; otherwise copy it out now.
                part = data[:, start:stop] if block else np.array(data[:, start:stop])
            else:
                part = np.concatenate([data[:, start:], data[:, : stop - snap.time_len]], axis=1)
            parts.append(part)
        gap = len(gaps) > len(tip.gaps)
        job = functools.partial(self._append, begin, end, parts, snap.counter, gaps, gap)
        # The tip moves only once the append has run (blocking) or is queued (non-blocking):
        # a write that fails or is interrupted (Ctrl-C) leaves it at the last commit, so the
        # next write of the same buffer appends exactly what is missing.
        if block:
            self.flush()
            self._run_now(job)
        else:
            self._submit(job)
        self._tip = _Tip(end, snap.counter, gaps)
        return unsaved

    def _run_now(self, job: Any) -> None:
        try:
            job()
        except BaseException as err:
            commit = self._commit
            self._tip = _Tip(
                int(commit["committed_length"]),
                commit.get("source_counter"),
                list(commit.get("gaps", [])),
            )
            if isinstance(err, Exception) and not isinstance(err, VaultError):
                raise VaultError(
                    f"{self.location}: the write failed ({type(err).__name__}: {err}); the "
                    f"vault is at its last commit ({self.committed_length} timesteps). "
                    "Writing the same buffer again appends what is missing."
                ) from err
            raise

    def _append(
        self,
        begin: int,
        end: int,
        parts: list[np.ndarray],
        counter: int | None,
        gaps: list[Any],
        gap: bool = False,
        restart: np.ndarray | None = None,
    ) -> None:
        """Data first (every leaf and the episode index, awaited), then the commit record.

        ``gap``: timesteps were lost right before ``begin`` (open episodes lose their start);
        ``restart`` (per row): the data at ``begin`` does not continue the rows' open episodes
        (they are dropped; new ones start at ``begin``, whose start is known where true).
        """
        rec = self._reclaimer_for_append()
        held: list[tuple[Path, int]] = []
        try:
            with rec.appending() if rec is not None else contextlib.nullcontext():
                self._append_locked(begin, end, parts, counter, gaps, gap, restart, rec, held)
        finally:
            if rec is not None:
                rec.release(held)

    def _append_locked(
        self,
        begin: int,
        end: int,
        parts: list[np.ndarray],
        counter: int | None,
        gaps: list[Any],
        gap: bool,
        restart: np.ndarray | None,
        rec: Reclaimer | None,
        held: list[tuple[Path, int]],
    ) -> None:
        futures = []
        if parts:
            if rec is not None:
                held += rec.hold(self._replaced_by_append(rec.root, begin, end))
            arrays = self._grow(end)
            futures = [
                arr[:, begin:end].write(part) for arr, part in zip(arrays, parts, strict=True)
            ]
        episodes = self._commit.get("episodes")
        if self._episode_cfg is not None and episodes is not None:
            open_eps = episodes["open"]
            if gap:
                open_eps = initial_open(self.rows, begin, start_known=False)
            elif restart is not None:
                open_eps = initial_open(self.rows, begin)
                open_eps["flags"] = np.where(restart, 0, FLAG_START_UNKNOWN).tolist()
            count = int(episodes["count"])
            if parts:
                cfg = self._episode_cfg
                flag = {k: parts[self._names.index(v)] if v else None for k, v in cfg.items()}
                done = flag["done"]
                if done is None:
                    raise VaultCorruptError(f"{self.location}: episode config lacks 'done'")
                bounds, returns, open_eps = advance(
                    open_eps, begin, done, flag["truncated"], flag["reward"]
                )
                if len(bounds):
                    if rec is not None:
                        replaced = self._replaced_in_index(rec.root, count, count + len(bounds))
                        held += rec.hold(replaced)
                    index = self._grow_index(count + len(bounds))
                    futures.append(index[0][count : count + len(bounds)].write(bounds))
                    futures.append(index[1][count : count + len(bounds)].write(returns))
                    count += len(bounds)
            episodes = {"count": count, "open": open_eps}
        for fut in futures:
            fut.result()
        if rec is not None:
            held += rec.hold([rec.root / COMMIT_KEY])
        self._write_commit(end, counter, gaps, episodes)

    def _reclaimer_for_append(self) -> Reclaimer | None:
        """The writer's :class:`~vault._reclaim.Reclaimer` (local vaults only)."""
        if self._reclaimer is None and self._root["driver"] == "file" and self._lock is not None:
            self._reclaimer = Reclaimer(Path(self._root["path"]))
        return self._reclaimer

    def _replaced_by_append(self, root: Path, begin: int, end: int) -> Iterator[Path]:
        """Files under ``root`` that appending ``[begin, end)`` replaces: the partly filled
        time-chunk at ``begin`` of every leaf (all its row blocks), and the metadata of arrays
        that grow."""
        base = root / EXPERIENCE
        for leaf, arr in zip(self._manifest["leaves"], self._arrays, strict=True):
            folder = base / leaf["name"]
            if arr.shape[1] < end:
                yield folder / "zarr.json"
            chunk_rows, chunk_time = int(leaf["chunk"][0]), int(leaf["chunk"][1])
            if begin % chunk_time:
                item = ["0"] * len(leaf["shape"])
                for r in range(-(-self.rows // chunk_rows)):
                    yield folder.joinpath("c", str(r), str(begin // chunk_time), *item)

    def _replaced_in_index(self, root: Path, count: int, new_count: int) -> Iterator[Path]:
        """Files under ``root`` that adding episodes ``[count, new_count)`` replaces."""
        for key, item in ((BOUNDS, ["0"]), (RETURNS, [])):
            if self._index[0].shape[0] < new_count:
                yield root / key / "zarr.json"
            if count % INDEX_CHUNK:
                yield root.joinpath(key, "c", str(count // INDEX_CHUNK), *item)

    def _submit(self, job: Any) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vault-write")
        while len(self._pending) >= self.max_pending:
            self._pending[0].result()  # back-pressure: wait for the oldest
            self._pending.popleft()  # (only once done: an interrupted wait keeps it listed)
        self._pending.append(self._pool.submit(self._run_background, job))

    def _run_background(self, job: Any) -> None:
        if self._background_error is not None:
            return  # an earlier write failed: commit nothing after it
        try:
            job()
        except BaseException as err:
            self._background_error = err

    def _raise_background_error(self) -> None:
        err = self._background_error
        if err is None:
            return
        for fut in self._pending:
            fut.result()
        self._pending.clear()
        self._background_error = None
        self.refresh()  # continue from what is really committed
        raise VaultError(
            f"{self.location}: a background write failed ({type(err).__name__}: {err}); the "
            f"vault is at its last commit ({self.committed_length} timesteps). Writing the "
            "same buffer again appends what is missing."
        ) from err

    def flush(self) -> None:
        """Wait until every write has been committed; raise a background error if one failed."""
        while self._pending:
            self._pending[0].result()
            self._pending.popleft()
        self._raise_background_error()

    def _grow(self, length: int) -> list[Any]:
        """Make every array at least ``length`` long, growing a whole time-chunk at a time.

        Resizing rewrites (and fsyncs) each array's metadata, so arrays grow by at least a
        quarter (rounded up to whole chunks) rather than on every append; the Zarr shape may
        therefore run past the committed length (that tail holds the fill value). The commit
        record is the truth; see ``vault.committed_length``.
        """
        futures = []
        for i, arr in enumerate(self._arrays):
            if arr.shape[1] < length:
                step = int(self._chunk_time[self._names[i]])
                wanted = max(length, arr.shape[1] + arr.shape[1] // 4)  # grow >= 25 %
                target = -(-wanted // step) * step
                futures.append(
                    (
                        i,
                        arr.resize(
                            exclusive_max=[None, target] + [None] * (arr.rank - 2),
                            expand_only=True,
                            resize_metadata_only=True,
                        ),
                    )
                )
        for i, fut in futures:
            self._arrays[i] = fut.result()
        return self._arrays

    def _grow_index(self, count: int) -> list[Any]:
        """Make the episode-index arrays hold at least ``count`` episodes (25 % headroom)."""
        if self._index[0].shape[0] < count:
            wanted = max(count, self._index[0].shape[0] * 5 // 4)
            target = -(-wanted // INDEX_CHUNK) * INDEX_CHUNK
            futures = [
                arr.resize(
                    exclusive_max=[target] + [None] * (arr.rank - 1),
                    expand_only=True,
                    resize_metadata_only=True,
                )
                for arr in self._index
            ]
            self._index = [f.result() for f in futures]
        return self._index

    def _write_commit(
        self,
        length: int,
        counter: int | None,
        gaps: list[dict[str, int]],
        episodes: dict[str, Any] | None = None,
    ) -> None:
        doc: dict[str, Any] = {
            "committed_length": length,
            "source_counter": counter,
            "seq": int(self._commit.get("seq", 0)) + 1,
            "gaps": gaps,
        }
        if episodes is not None:
            doc["episodes"] = episodes
        write_commit(self._kv, doc)
        self._commit = doc

    def _check_state(self, snap: _Snapshot) -> list[Any]:
        """The state's leaves in vault order, or a VaultStructureError naming every bad leaf."""
        try:
            node = _structure.describe(snap.experience)
        except VaultStructureError as err:
            raise VaultStructureError(f"{self.location}: {err}") from None
        if node != self._manifest["structure"]:
            want = set(self._names)
            have = set(_structure.leaf_names(node))
            problems = [f"experience/{n}: missing from the state" for n in sorted(want - have)]
            problems += [f"experience/{n}: not in the vault" for n in sorted(have - want)]
            if not problems:
                problems = ["container types differ from the vault's structure"]
            raise VaultStructureError(
                f"{self.location}: the state's structure differs from the vault's; nothing written",
                problems,
            )
        values = _structure.leaves(snap.experience, node)
        problems = []
        if snap.rows != self.rows:
            problems.append(f"rows: expected {self.rows}, got {snap.rows}")
        for leaf, value in zip(self._manifest["leaves"], values, strict=True):
            shape = list(value.shape[snap.stack + 2 :])
            dtype = np.dtype(value.dtype).name
            if shape != leaf["shape"] or dtype != leaf["dtype"]:
                problems.append(
                    f"experience/{leaf['name']}: expected [{self.rows}, T, "
                    f"{', '.join(map(str, leaf['shape']))}] {leaf['dtype']}, got "
                    f"[{snap.rows}, T, {', '.join(map(str, shape))}] {dtype}".replace(", ]", "]")
                )
        if problems:
            raise VaultStructureError(
                f"{self.location}: the state does not match the vault; nothing written", problems
            )
        return values

    # ----------------------------------------------------------------------------- reading
    def _time_range(
        self,
        start: int | None,
        stop: int | None,
        last: int | None,
        percentiles: tuple[float, float] | None,
    ) -> tuple[int, int]:
        length = self.committed_length
        chosen = sum(x is not None for x in (last, percentiles)) + (
            start is not None or stop is not None
        )
        if chosen > 1:
            raise VaultReadError("give at most one of start/stop, last and percentiles")
        if last is not None:
            if not isinstance(last, (int, np.integer)) or last < 0:
                raise VaultReadError(f"last must be a non-negative int, got {last!r}")
            if last > length:
                raise VaultReadError(
                    f"{self.location}: asked for the last {last} timesteps but only {length} "
                    "are committed"
                )
            return length - int(last), length
        if percentiles is not None:
            try:
                low, high = (float(p) for p in percentiles)
            except (TypeError, ValueError):
                raise VaultReadError(
                    f"percentiles must be a pair (a, b), got {percentiles!r}"
                ) from None
            if not 0 <= low <= high <= 100:
                raise VaultReadError(
                    f"percentiles must satisfy 0 <= a <= b <= 100, got ({low}, {high})"
                )
            return math.floor(low / 100 * length), math.floor(high / 100 * length)
        lo = 0 if start is None else int(start)
        hi = length if stop is None else int(stop)
        if not 0 <= lo <= hi <= length:
            raise VaultReadError(
                f"{self.location}: time range [{lo}, {hi}) is outside the committed [0, {length})"
            )
        return lo, hi

    def _views(
        self,
        rows: Sequence[int] | slice | None,
        start: int | None,
        stop: int | None,
        last: int | None,
        percentiles: tuple[float, float] | None,
        leaves: Sequence[str] | None,
    ) -> tuple[list[str], list[Any], int]:
        """Selected leaf names, lazy TensorStore views of ``[rows, lo:hi]`` (origin 0), and
        ``lo``."""
        lo, hi = self._time_range(start, stop, last, percentiles)
        row_sel = self._row_selection(rows)
        wanted = self._names if leaves is None else list(leaves)
        unknown = [n for n in wanted if n not in self._names]
        if unknown:
            raise VaultReadError(
                f"{self.location}: unknown leaves {unknown}; the vault has {self._names}"
            )
        index = {n: i for i, n in enumerate(self._names)}
        views = [self._arrays[index[n]][row_sel, lo:hi].translate_to[0] for n in wanted]
        return wanted, views, lo

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
        wanted, views, lo = self._views(rows, start, stop, last, percentiles, leaves)
        out = self._fetch(
            [(view, name, int(view.shape[1]), lo) for view, name in zip(views, wanted, strict=True)]
        )
        if leaves is not None:
            return dict(zip(wanted, out, strict=True))
        return _structure.build(self._manifest["structure"], out)

    def _row_selection(self, rows: Sequence[int] | slice | None) -> Any:
        if rows is None:
            return slice(None)
        if isinstance(rows, slice):
            return rows
        picked = [int(r) for r in rows]
        bad = [r for r in picked if not 0 <= r < self.rows]
        if bad:
            raise VaultReadError(f"{self.location}: rows {bad} out of range [0, {self.rows})")
        return picked

    def _result(self, future: Any, name: str, group: str = EXPERIENCE) -> np.ndarray:
        """A read's value; a chunk that fails its checksum or decoding is VaultCorruptError."""
        try:
            return future.result()
        except ValueError as err:
            text = str(err)
            if not text.startswith(("DATA_LOSS", "FAILED_PRECONDITION")):
                raise
            found = re.search(r"/c/([0-9/]+)\"", text)
            chunk = f"chunk {found.group(1).replace('/', '.')}" if found else "a chunk"
            raise VaultCorruptError(
                f"{self.location}: array {group}/{name}, {chunk} is corrupt ({text}). "
                "Its data cannot be trusted; restore the vault from a copy."
            ) from None

    def read(
        self,
        timesteps: int | None = None,
        percentiles: tuple[float, float] | None = None,
        *,
        rows: Sequence[int] | slice | None = None,
        start: int | None = None,
        stop: int | None = None,
        leaves: Sequence[str] | None = None,
        capacity: int | None = None,
    ) -> Any:
        """Committed data as a trajectory-buffer state (``timesteps``: the last N).

        With ``capacity`` the state's time axis has that length: the data fills its start,
        ``current_index``/``is_full`` are set so that ``add`` continues after it (when
        ``capacity`` is smaller than the data, the most recent ``capacity`` timesteps are kept).
        """
        import jax.numpy as jnp

        from buffers import TrajectoryBufferState

        wanted, views, lo = self._views(rows, start, stop, timesteps, percentiles, leaves)
        length = int(views[0].shape[1])
        cap = length if capacity is None else int(capacity)
        if cap < 1:
            raise VaultReadError(f"capacity must be >= 1 (and the read non-empty), got {cap}")
        keep = min(cap, length)
        import jax

        fetched = self._fetch(
            [
                (view[:, length - keep :].translate_to[0], name, cap, lo + length - keep)
                for view, name in zip(views, wanted, strict=True)
            ]
        )
        out = [jax.device_put(arr) for arr in fetched]
        fetched.clear()
        if leaves is not None:
            experience: Any = dict(zip(wanted, out, strict=True))
        else:
            experience = _structure.build(self._manifest["structure"], out)
        full = cap <= length
        return TrajectoryBufferState(
            experience=experience,
            current_index=jnp.asarray(0 if full else length, jnp.int32),
            is_full=jnp.asarray(full),
        )

    def _fetch(self, items: list[tuple[Any, str, int, int]]) -> list[np.ndarray]:
        """For each ``(view, name, capacity, offset)`` (``offset``: the array's time index of
        the view's time 0): the view as an aligned numpy array ``[rows, capacity, ...]`` (data
        first, then the fill value).

        TensorStore decodes chunks straight into the arrays (no intermediate copy). The reads
        go out in pieces of whole time-chunks (about ``READ_BLOCK_BYTES``, cut on the chunk
        grid so that no chunk is decoded twice), across leaves, with at least two pieces and
        at most an eighth of the read (8 to 64 MiB) in flight: decoding and disk reads stay
        parallel while the encoded bytes held at once stay a small share of the data.
        """
        outs: list[np.ndarray] = []
        pieces: list[tuple[np.ndarray, Any, str, int]] = []
        for view, name, capacity, offset in items:
            length = int(view.shape[1])
            shape = (int(view.shape[0]), capacity, *(int(d) for d in view.shape[2:]))
            arr = _aligned_empty(shape, np.dtype(view.dtype.numpy_dtype), zero=capacity > length)
            outs.append(arr)
            step_bytes = max(1, arr.nbytes // max(capacity, 1))
            chunk_t = int(self._chunk_time[name])
            block = max(1, READ_BLOCK_BYTES // step_bytes // chunk_t) * chunk_t
            t0 = 0
            while t0 < length:  # piece ends on the chunk grid (absolute time offset + t)
                t1 = min(length, (offset + t0) // block * block + block - offset)
                pieces.append((arr[:, t0:t1], view[:, t0:t1], name, (t1 - t0) * step_bytes))
                t0 = t1
        budget = min(READ_INFLIGHT_MAX, max(READ_INFLIGHT_MIN, sum(p[3] for p in pieces) // 8))
        inflight: collections.deque[tuple[Any, str, int]] = collections.deque()
        held = 0
        for out, source, name, nbytes in pieces:
            while len(inflight) >= 2 and held + nbytes > budget:
                future, done_name, done_bytes = inflight.popleft()
                self._result(future, done_name)
                held -= done_bytes
            inflight.append((ts.array(out).write(source), name, nbytes))
            held += nbytes
        for future, name, _ in inflight:
            self._result(future, name)
        return outs

    def close(self) -> None:
        """Wait for pending writes, then release the writer lock (if held). Reading methods
        keep working; writes do not."""
        try:
            self.flush()
        finally:
            if self._reclaimer is not None:
                self._reclaimer.close()
                self._reclaimer = None
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            self._closed = True

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Vault({self.location!r}, rows={self.rows}, committed_length={self.committed_length}, "
            f"leaves={self._names})"
        )


def _context(root: dict[str, Any]) -> Any:
    """One TensorStore context per memory:// location so every handle sees the same store."""
    if root["driver"] != "memory":
        return _shared_context()
    key = root["path"]
    if key not in _MEMORY_CONTEXTS:
        _MEMORY_CONTEXTS[key] = ts.Context()
    return _MEMORY_CONTEXTS[key]


_MEMORY_CONTEXTS: dict[str, Any] = {}


@functools.cache
def _shared_context() -> Any:
    """One context for every file and object-store vault of the process: TensorStore's I/O
    and decoding resources are started once (opening the first vault of a fresh context cost
    about 5 ms more, measured cold)."""
    return ts.Context()


def _group_paths(names: list[str]) -> list[str]:
    groups: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            groups.add("/".join(parts[:i]))
    return sorted(groups)


def _check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    import json

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise VaultMetadataError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        return json.loads(json.dumps(metadata))
    except (TypeError, ValueError) as err:
        raise VaultMetadataError(f"metadata must be JSON-serialisable: {err}") from None


def _compat_compression(compression: dict[str, Any] | None) -> tuple[str | None, int | None]:
    if compression is None:
        return "auto", None
    cname = compression.get("cname") or compression.get("id") or "zstd"
    level = compression.get("clevel") or compression.get("level")
    return ("blosc" if compression.get("id") == "blosc" else cname), level
