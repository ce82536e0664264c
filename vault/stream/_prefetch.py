"""A background producer behind an iterator: the machinery under every stream.

:class:`Stream` runs a generator on a background thread, at most ``depth`` items ahead of the
consumer; an error raised while producing is raised by the consumer's next ``next()``; closing
(explicitly, by ``with``, by garbage collection or at interpreter exit) stops the thread.
"""

from __future__ import annotations

import atexit
import collections
import queue
import sys
import threading
import weakref
from collections.abc import Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_POLL_S = 0.05

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _pump(
    items: Generator[Any, None, None],
    out: queue.SimpleQueue[Any],
    slots: threading.Semaphore,
    stop: threading.Event,
) -> None:
    """Run ``items`` on this thread, at most ``slots`` items ahead of the consumer."""
    try:
        while True:
            while not slots.acquire(timeout=_POLL_S):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            try:
                item = next(items)
            except StopIteration:
                out.put(_END)
                return
            out.put(item)
    except BaseException as err:  # handed to the consumer, raised by its next()
        out.put(_Failure(err))
    finally:
        items.close()


class Stream(Generic[T]):
    """An iterator whose items are produced ahead on a background thread.

    ``depth`` items at most are produced ahead of the consumer (``depth=0``: no thread, items
    are produced on demand in the caller's thread). An error raised while producing is raised
    by the consumer's next ``next()``. :meth:`close` (also called by ``with`` and when the
    stream is garbage-collected) stops the thread and releases what it holds.
    """

    def __init__(
        self,
        items: Generator[Any, None, None],
        depth: int,
        name: str = "rlvault-stream",
        packed: bool = False,
    ) -> None:
        # ``packed``: ``items`` yields non-empty lists of items (handed over a list at a time)
        self._items: Generator[Any, None, None] | None = items
        self._packed = packed
        self._ready: collections.deque[T] = collections.deque()
        self._closed = False
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
            self._slots = threading.Semaphore(depth)
            self._stop = threading.Event()
            # The thread holds the generator, the queue and the events, never ``self``: a
            # stream the consumer drops is collected, and its __del__ stops the thread.
            self._thread = threading.Thread(
                target=_pump,
                args=(items, self._queue, self._slots, self._stop),
                name=name,
                daemon=True,
            )
            self._items = None
            self._thread.start()
            _LIVE.add(self)

    def __iter__(self) -> Stream[T]:
        return self

    def __next__(self) -> T:
        if self._ready:
            return self._ready.popleft()
        if self._closed:
            raise StopIteration
        if self._thread is None:
            items = self._items
            if items is None:
                raise StopIteration
            try:
                item = next(items)
            except BaseException:  # the end, or an error: either way nothing follows
                self.close()
                raise
        else:
            item = self._queue.get()
            self._slots.release()
            if item is _END:
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.error
        if not self._packed:
            return item
        self._ready.extend(item)
        return self._ready.popleft()

    def close(self) -> None:
        """Stop producing (idempotent); the background thread has ended when this returns."""
        if self._closed:
            return
        self._closed = True
        self._ready.clear()
        if self._thread is None:
            if self._items is not None:
                self._items.close()
                self._items = None
            return
        self._stop.set()
        self._thread.join()
        while True:  # drop what was produced ahead
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the items ran out)."""
        return self._closed

    def __enter__(self) -> Stream[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter exit the atexit hook has closed every live stream; a join here, while
        # the interpreter is finalizing, would fail.
        if getattr(self, "_closed", True) is False and not sys.is_finalizing():
            self.close()


_LIVE: weakref.WeakSet[Stream[Any]] = weakref.WeakSet()


@atexit.register
def _close_live_streams() -> None:
    """Stop every background reader before the interpreter tears down (a daemon thread still
    inside TensorStore at that point aborts the process)."""
    for stream in list(_LIVE):
        stream.close()
