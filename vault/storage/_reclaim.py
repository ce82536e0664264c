"""Frees the files an append replaces off the write path (local file systems).

An append rewrites a few files in place of old ones: the partly filled last time-chunk of
each leaf, array metadata when an array grows, and the commit record. TensorStore (and our
commit) write a new file and ``rename`` it over the old one, so the rename frees the old
file's blocks. On file systems that discard freed blocks synchronously (ext4 mounted with
``discard``, as on many cloud VMs) freeing costs about 1 ms per file (2 ms at 256 KiB,
measured on the development machine), against 0.05 ms to create, fsync and rename a new one:
freeing is most of a small write.

So, before an append, the writer hard-links each file it is about to replace into
``trash/`` (a few microseconds; the rename then frees nothing), and after the commit a
background thread unlinks them, one at a time, only while no append is running. Appends
never wait for an unlink except one already in progress. The held files are bounded
(:data:`MAX_HELD` files, :data:`MAX_HELD_BYTES`; beyond that the writer frees the oldest
itself), :meth:`close` frees them
all, and a writer that died leaves them for the next writer to free (at its first append).
None of this changes what is committed: the held files are old versions that no commit
refers to, and readers never look in ``trash/``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from vault.format._records import TRASH_DIR

_log = logging.getLogger(__name__)

MAX_HELD = 256  # old files waiting to be freed; beyond this the writer frees them itself
MAX_HELD_BYTES = 64 << 20  # and their bytes
_GROUP_JSON = '{"zarr_format": 3, "node_type": "group", "attributes": {"rlvault": "trash"}}'


class Reclaimer:
    """Hold-then-free for one writer of a vault rooted at ``root`` (a local directory).

    Used only while the writer lock is held, so no other process touches ``trash/``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root  # the vault's directory
        self._dir = root / TRASH_DIR
        self._dir.mkdir(exist_ok=True)
        meta = self._dir / "zarr.json"
        if not meta.exists():  # an empty Zarr group, so zarr-python lists it quietly
            tmp = self._dir / f".zarr.json.{os.getpid()}.tmp"
            tmp.write_text(_GROUP_JSON)
            os.replace(tmp, meta)
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[Path, int]] = collections.deque()
        self._bytes = 0  # held in the queue
        self._appending = 0  # appends running (the reaper waits while > 0)
        self._unlinking = False  # the reaper is inside an unlink (an append waits for it)
        self._closing = False
        self._thread: threading.Thread | None = None
        self._names = itertools.count()
        self._prefix = f"{os.getpid()}-{id(self):x}"
        self.enabled = True
        leftovers = self._leftovers()
        if leftovers:
            _log.info("%s: freeing %d files left by a writer that died", root, len(leftovers))
            self._queue.extend((p, 0) for p in leftovers)
            self._start()

    # ------------------------------------------------------------------ the writer's side
    @contextlib.contextmanager
    def appending(self) -> Iterator[None]:
        """Hold this around an append: the reaper pauses (after its current unlink)."""
        with self._cond:
            self._appending += 1
            while self._unlinking:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._appending -= 1
                self._cond.notify_all()

    def hold(self, keys: Iterable[str]) -> list[tuple[Path, int]]:
        """Hard-link each existing file of ``keys`` (relative to the vault's root) into
        ``trash/``; returns the links.

        A file that does not exist is skipped. If the file system refuses hard links the
        reclaimer turns itself off (replacements then free their files inline, as without it).
        """
        held: list[tuple[Path, int]] = []
        if not self.enabled:
            return held
        for key in keys:
            path = self.root / key
            link = self._dir / f"{self._prefix}-{next(self._names)}"
            try:
                os.link(path, link)
            except FileNotFoundError:
                continue
            except OSError as err:
                _log.info("%s: hard links unavailable (%s); freeing inline", self._dir, err)
                self.enabled = False
                break
            held.append((link, link.stat().st_size))
        return held

    def release(self, held: list[tuple[Path, int]]) -> None:
        """Queue ``held`` for freeing (call after the commit). Beyond the bounds, the oldest
        are freed here, by the caller."""
        if not held:
            return
        excess = []
        with self._cond:
            self._queue.extend(held)
            self._bytes += sum(size for _, size in held)
            while len(self._queue) > MAX_HELD or self._bytes > MAX_HELD_BYTES:
                excess.append(self._queue.popleft())
                self._bytes -= excess[-1][1]
            self._start()
            self._cond.notify_all()
        for path, _ in excess:
            _unlink(path)

    def close(self) -> None:
        """Free every held file now and stop the reaper."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            rest = list(self._queue)
            self._queue.clear()
            self._bytes = 0
        for path, _ in rest:
            _unlink(path)

    # ------------------------------------------------------------------ the reaper
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._reap, name="vault-reclaim", daemon=True)
            self._thread.start()

    def _reap(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (not self._queue or self._appending):
                    self._cond.wait()
                if not self._queue:
                    return  # closing and nothing left
                path, size = self._queue.popleft()
                self._bytes -= size
                self._unlinking = True
            try:
                _unlink(path)
            finally:
                with self._cond:
                    self._unlinking = False
                    self._cond.notify_all()

    def _leftovers(self) -> list[Path]:
        return [p for p in self._dir.iterdir() if p.name != "zarr.json" and p.is_file()]


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:  # never fail a write over an old version; the next writer retries
        _log.warning("could not free %s: %s", path, err)
