"""The one writer of a vault: its lock, where the next append goes (the tip), and how appends
run (now, or queued in the background).

A :class:`Writer` plans each write (``vault/write/_plan.py``), runs it through the commit protocol
(``vault/write/_commit.py``) and keeps the snapshot of its latest commit. The tip moves only once an
append has run (blocking) or is queued (non-blocking): a write that fails or is interrupted
(Ctrl-C) leaves it at the last commit, so the next write of the same buffer appends exactly
what is missing.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import numpy as np

from vault._errors import VaultError, VaultModeError, VaultStructureError
from vault.commits._snapshot import Snapshot, reopen
from vault.storage._failures import failed_os_call, os_failure, reason_of, remedy_of
from vault.storage._location import WriterLock
from vault.storage._reclaim import Reclaimer
from vault.storage._relay_write import WriteRelay
from vault.write import _commit, _device
from vault.write._background import BackgroundQueue
from vault.write._plan import (
    AppendJob,
    ArraysView,
    BufferView,
    OnOverrun,
    Tip,
    check_leaves,
    plan_append,
    plan_write,
    same_buffer,
)
from vault.write._stage import StagingPool


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# chunks a background write (``write(block=False)``) encodes at once: one core is left to the
# training loop that queued it (measured: docs/performance.md, "Recording")
BACKGROUND_LANES = max(1, _cores() - 1)


class Writer:
    """Appends to the vault at ``snapshot`` while holding its writer ``lock``."""

    def __init__(self, snapshot: Snapshot, lock: WriterLock) -> None:
        snapshot = _commit.fence(snapshot, lock)  # no earlier holder of the lock commits now
        _commit.mark_groups(snapshot)
        self.snapshot = snapshot  # the latest commit of this writer
        self.tip = Tip.of(snapshot.commit)
        self.closed = False
        self._reopen = False  # the arrays must be reopened before the next write
        self._lock: WriterLock | None = lock
        self._queue = BackgroundQueue(where=snapshot.where)
        self._reclaimer: Reclaimer | None = None
        self._reclaimer_checked = False
        # where every request is a round trip: chunks written through memory
        self._relay = WriteRelay() if snapshot.location.remote else None
        self._staging = StagingPool()  # appends staged in whole chunks (local locations)
        # the reference-style constructor: a buffer the writer has not seen is appended whole
        self.adopt_buffers = False

    @property
    def where(self) -> str:
        return self.snapshot.where

    @property
    def max_pending(self) -> int:
        return self._queue.max_pending

    @max_pending.setter
    def max_pending(self, value: int) -> None:
        self._queue.max_pending = int(value)

    @property
    def reclaimer(self) -> Reclaimer | None:
        """Frees replaced files off the write path (created at the first append, where the
        location can hold files by hard links)."""
        if not self._reclaimer_checked:
            self._reclaimer_checked = True
            if self.snapshot.location.capabilities.hard_links:
                self._reclaimer = self.snapshot.location.reclaimer()
        return self._reclaimer

    # ------------------------------------------------------------------------- writing
    def write(self, state: Any, *, on_overrun: OnOverrun, new_buffer: bool, block: bool) -> int:
        """Append what ``state`` holds beyond the tip; returns how many timesteps per row."""
        self._check_open()
        if block:
            self.flush()  # the tip's tails are known (a background write may stage them)
        given = BufferView(state)
        values = check_leaves(self.snapshot.manifest, given, self.where)
        if given.counter == 0:
            # nothing ever added: nothing to save, and nothing about the vault changes (no
            # commit, no seam; the buffer it records stays the one written last)
            return 0
        view = given.rebased(self.tip.source_counter)
        fresh = self._is_fresh(view, values, new_buffer)
        job = plan_write(
            self.tip,
            given if fresh else view,
            values,
            where=self.where,
            on_overrun=on_overrun,
            fresh=fresh,
            new_buffer=new_buffer,
            copy=not block,
            chunks=self._chunks(),
            empty=self._staging.empty,
        )
        if job is None:
            self.tip = dataclasses.replace(self.tip, known_source=True)
            return 0
        if block:
            self.run_now(job)
        else:
            self._queue.submit(lambda: self._apply(job, BACKGROUND_LANES))
            self.tip = job.tip_after(self.tip)
        return job.end - job.begin

    def _chunks(self) -> tuple[int, ...] | None:
        """The chunk time per leaf, to stage appends in whole chunks
        (:class:`~vault.write._stage.Staged`); None on a remote location, whose relay keeps
        the partly filled chunks itself (``vault/storage/_relay_write.py``)."""
        if self._relay is not None:
            return None
        return tuple(leaf.chunk[1] for leaf in self.snapshot.manifest.leaves)

    def _is_fresh(self, view: BufferView, values: list[Any], new_buffer: bool) -> bool:
        """Whether ``view`` is a buffer other than the one the tip's counter belongs to (so
        that everything it holds is new).

        A counter read from the commit record (this writer has not written that buffer yet),
        or ``new_buffer=True``, is checked: the buffer must still hold, at that counter, the
        vault's last timestep. If it does, it is the same buffer and only what is new is
        appended (so ``new_buffer=True`` on every write never stores a timestep twice). If it
        does not, it is another buffer: with ``new_buffer=True`` or a writer that adopts
        buffers (the reference-style constructor, which tracks buffers per Vault object)
        everything it holds is appended; otherwise the write is refused, never silently short.
        A buffer that no longer holds that timestep, further on than the one this writer
        wrote last, is that buffer overrun, not another one: the overrun policy applies (by
        default :class:`UnsavedDataLostError`). So with ``new_buffer=True`` where it is more
        than a ring further on (so that passing the flag on every write never hides an
        overrun; a new buffer that far on had wrapped before its first write, losing
        timesteps too); closer than that it is a new buffer, all it holds appended. One that
        had exactly a ring's worth added since the vault's last timestep (the most a write may
        wait, so that nothing is left to compare) is taken for that buffer, written on time.
        """
        tip = self.tip
        if not tip.source_counter:  # no buffer written yet (or one with nothing in it)
            return tip.length > 0  # after appended arrays a buffer is another source: a seam
        if tip.known_source and not new_buffer and not self.adopt_buffers:
            # the buffer this writer wrote, unless its data say otherwise; checked where that
            # costs no wait (a buffer on an accelerator would be read back, stalling the step)
            # (a counter behind the vault's is plan_write's to tell)
            last, ahead = tip.last, view.counter >= tip.source_counter
            host = not any(map(_device.on_accelerator, values[:1]))
            checked = last is not None and ahead and host
            same = same_buffer(tip, view, values, last) if checked and last is not None else None
            if same is False:
                raise self._not_that_buffer(view)
            return False
        if tip.length == 0 and tip.last is None:
            same = None  # nothing stored to compare with
        else:
            same = same_buffer(tip, view, values, self._last_timestep())
        if same is True:
            return False
        beyond = view.counter - (tip.source_counter or 0) > view.stored
        if same is None and tip.known_source and (beyond or not new_buffer):
            # the buffer this writer wrote, overrun (plan_write tells the loss); with
            # new_buffer=True too, since a new buffer this far on had wrapped before its
            # first write and lost timesteps as well: loud either way, never taken quietly
            return False
        if same is None and view.full and view.counter - tip.source_counter == view.stored:
            # exactly a ring's worth added since the vault's last timestep (the most a write
            # may wait): nothing the vault holds is left to compare, and nothing is lost
            return False
        if same is False and tip.known_source and not new_buffer and _back_where(view, tip):
            # where this writer's buffer was at its last write, holding other data there:
            # a ring or more later (how many, a derived counter cannot tell) or another
            # buffer; taken for either, the loss recorded could be wrong
            raise self._not_that_buffer(view)
        if new_buffer or self.adopt_buffers:
            return True
        if same is None:
            return False  # it cannot tell: plan_write saves all it holds, or reports a loss
        raise self._not_that_buffer(view)

    def _not_that_buffer(self, view: BufferView) -> VaultStructureError:
        source = self.tip.source_counter or 0
        return VaultStructureError(
            f"{self.where}: this is not the buffer the vault was last written from: the vault "
            f"holds its first {source} timesteps, and this buffer "
            + (
                f"has had only {view.counter} added"
                if view.counter < source
                else f"holds different data at timestep {source - 1}"
            )
            + (
                " (a state in the reference's shape: its counter derived from its position, "
                "a ring or more added since the last write looks the same; write it more often "
                f"than every {view.time_len} adds)"
                if _back_where(view, self.tip)
                else ""
            )
            + ". Nothing was written. If it is a new buffer (a new process, a restarted run), "
            "pass new_buffer=True to append everything it holds; to continue the old buffer, "
            "write the state restored from its checkpoint."
        )

    def _last_timestep(self) -> tuple[np.ndarray, ...]:
        """The vault's last appended timestep per leaf (from the tip, else read)."""
        if self.tip.last is not None:
            return self.tip.last
        snap = self.snapshot
        at = snap.length - 1
        futures = [a[:, at].read() for a in snap.arrays]
        last = tuple(np.asarray(f.result()) for f in futures)
        self.tip = dataclasses.replace(self.tip, last=last)
        return last

    def append(self, experience: Any, restart: np.ndarray | None, lost: int = 0) -> int:
        """Append arrays ``[rows, n, ...]`` (blocking); ``restart`` and ``lost`` as in
        :class:`~vault.write._plan.AppendJob`. Returns ``n``."""
        self._check_open()
        self.flush()
        view = ArraysView(experience)
        values = check_leaves(self.snapshot.manifest, view, self.where)
        parts = [np.asarray(v) for v in values]
        job = plan_append(
            self.tip, self.snapshot.rows, parts, restart, lost, self._chunks(), self._staging.empty
        )
        self.run_now(job)
        return view.time_len

    def run_now(self, job: AppendJob) -> None:
        """Run ``job`` in this thread, after every queued one."""
        self.flush()
        try:
            self._apply(job)
        except BaseException as err:
            self._back_to_commit()
            if isinstance(err, Exception) and not isinstance(err, VaultError):
                raise self._failure("the write failed", err) from err
            raise
        self.tip = job.tip_after(self.tip)

    def _apply(self, job: AppendJob, lanes: int | None = None) -> None:
        if self._lock is None:
            raise VaultModeError(f"{self.where}: this Vault was closed")
        job = job.resolved()  # a buffer on an accelerator: copied to the host, staged
        try:
            self.snapshot = _commit.apply(
                self.snapshot, job, self._lock, self.reclaimer, self._relay, lanes
            )
        finally:
            self._staging.release(job.staged)

    def _back_to_commit(self) -> None:
        """After a failed append: the tip is what is really committed, the arrays as stored.
        Where the storage is failing too (a dead server), the failure being reported stays the
        one raised, and the next write reopens first."""
        try:
            self.snapshot = reopen(self.snapshot)
        except Exception:
            self._reopen = True
        else:
            self._reopen = False
        self.tip = Tip.of(self.snapshot.commit)

    # ------------------------------------------------------------------------- lifecycle
    def _check_open(self) -> None:
        self._raise_background_error()
        if self.closed:
            raise VaultModeError(f"{self.where}: this Vault was closed")
        if self._reopen:  # a failed append could not reopen the arrays then
            self.snapshot = reopen(self.snapshot)
            self.tip = Tip.of(self.snapshot.commit)
            self._reopen = False

    def _raise_background_error(self) -> None:
        self._raise_failure(self._queue.take_error())

    def flush(self) -> None:
        """Wait until every queued write is committed; raise a background error if one
        failed."""
        self._raise_failure(self._queue.wait())

    def _raise_failure(self, err: BaseException | None) -> None:
        if err is None:
            return
        self._back_to_commit()
        if isinstance(err, VaultError):  # typed already (a lost lock): keep its type
            err.add_note(
                f"(raised by a background write; the vault is at its last commit "
                f"({self.snapshot.length} timesteps))"
            )
            raise err
        raise self._failure("a background write failed", err) from err

    def _failure(self, what: str, err: BaseException) -> VaultError:
        """The error of a failed append (``what`` says which): one the storage caused (a full
        disk, no permission) is typed by its cause (:func:`~vault.storage._failures.os_failure`)
        and names the file and the fix; any other is a :class:`VaultError` quoting it."""
        tail = (
            f"the vault is at its last commit ({self.snapshot.length} timesteps). Writing the "
            "same buffer again appends what is missing."
        )
        found = failed_os_call(err)
        if found is None:
            return VaultError(f"{self.where}: {what} ({type(err).__name__}: {err}); {tail}")
        code, path = found
        place = f" at {path}" if path else ""
        return os_failure(
            code, f"{self.where}: {what} ({reason_of(code)}{place}; {remedy_of(code)}); {tail}"
        )

    def _trim(self) -> None:
        """:func:`vault.write._commit.trim`; a failure leaves the data as committed (arrays merely
        longer than committed, as after a crash), so it is a warning, not an error."""
        if self._lock is None:
            return
        try:
            self.snapshot = _commit.trim(self.snapshot, self._lock, self._relay)
        except Exception as err:
            warnings.warn(
                f"{self.where}: the arrays' shapes could not be cut to the committed length "
                f"({type(err).__name__}: {err}). The data is committed; plain Zarr readers see "
                "fill values past it until a writer closes cleanly again.",
                RuntimeWarning,
                stacklevel=4,  # the caller of Vault.close
            )

    @property
    def pending(self) -> int:
        return len(self._queue)

    def refresh(self) -> Snapshot:
        """Wait for queued writes, then re-read the commit record."""
        self.flush()
        self.snapshot = self.snapshot.refreshed()
        self.tip = Tip.of(self.snapshot.commit)
        return self.snapshot

    def close(self) -> None:
        """Wait for queued writes, cut the arrays' shapes to the committed length (a vault at
        rest shows plain Zarr readers only committed data), free held files (a dead writer's
        too, even where this one appended nothing), stop the thread, release the lock."""
        try:
            self.flush()
            self._trim()
            if self._lock is not None:
                _ = self.reclaimer  # made now if no append made it: frees a dead writer's files
        finally:
            if self._reclaimer is not None:
                self._reclaimer.close()
                self._reclaimer = None
            if self._relay is not None:
                self._relay.close()
            self._queue.close()
            self._staging.clear()
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            self.closed = True


def _back_where(view: BufferView, tip: Tip) -> bool:
    """Whether ``view`` (a state in the reference's shape, its counter derived from its
    position) is where the buffer was at the vault's last write of it: full, and its counter
    counted on from the vault's record is that record."""
    return view.derived and view.full and view.counter == tip.source_counter
