"""Write planning, without I/O: (what is committed or queued, a buffer state, the overrun
policy) -> an :class:`AppendJob`, a frozen record of exactly what to append.

:func:`plan_write` decides which timesteps of a buffer state are new (by the buffer's
never-wrapping write counter against the one recorded at the previous write), unrolls the ring
buffer's wrap-around, and applies the overrun policy; :func:`plan_append` does the same for
arrays given directly. :func:`check_leaves` checks a state against the manifest and names
every bad leaf.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from vault._errors import UnsavedDataLostError, VaultArgumentError, VaultStructureError
from vault.format import _structure
from vault.format._records import CommitRecord, Manifest, Seam
from vault.write import _device
from vault.write._stage import Empty, PendingTails, Staged, Tails, known_tails, stage

OnOverrun = Literal["error", "save_surviving"]


@dataclasses.dataclass(frozen=True)
class Tip:
    """Where the next append goes: after every write issued so far (committed or queued)."""

    length: int
    source_counter: int | None
    seams: tuple[Seam, ...]
    # True once this writer has written (or checked) the buffer the counter belongs to; a
    # counter read from the commit record may belong to a buffer of another process
    known_source: bool = False
    # the last appended timestep, one array [rows, ...] per leaf, numpy or (a buffer on an
    # accelerator) on its device (None: read it if needed)
    last: tuple[Any, ...] | None = None
    # per leaf, the timesteps appended so far to the partly filled time chunk at ``length``
    # ([rows, length % chunk time, ...]; None: not kept, or not known since the last commit;
    # pending while the background thread has yet to stage the append that leaves them)
    tail: Tails | PendingTails | None = None

    @classmethod
    def of(cls, commit: CommitRecord) -> Tip:
        return cls(commit.committed_length, commit.source_counter, commit.seams)


@dataclasses.dataclass(frozen=True)
class AppendJob:
    """Append ``parts`` (one array ``[rows, end - begin, ...]`` per leaf, leaf order) at
    ``begin``, then commit ``end`` with ``source_counter`` and ``seams``.

    ``lost_before``: timesteps were lost right before ``begin`` (open episodes lose their
    start); ``restart`` (per row, or None): the data at ``begin`` does not continue the rows'
    open episodes (new ones start at ``begin``, with a known start where true).

    ``staged`` (empty: write ``parts`` as they are): per leaf, the data to write in whole time
    chunks (``vault.write._stage.Staged``), of which ``parts`` are views; ``tail``: the tip's
    ``tail`` after this job.

    ``pending`` (a write of a buffer on an accelerator, to run in the background): the job
    with its data copied to the host and staged, made by the writer's background thread
    (:meth:`resolved`; ``tail`` is set then). Until then ``parts`` is empty and ``last`` holds
    the last timestep (on the device) for the tip.
    """

    begin: int
    end: int
    parts: tuple[Any, ...]
    source_counter: int | None
    seams: tuple[Seam, ...]
    lost_before: bool = False
    restart: np.ndarray | None = None
    staged: tuple[Staged, ...] = ()
    tail: Tails | PendingTails | None = None
    pending: Callable[[], AppendJob] | None = None
    last: tuple[Any, ...] | None = None

    def resolved(self) -> AppendJob:
        """This job with its data on the host (itself unless ``pending``)."""
        return self if self.pending is None else self.pending()

    def tip_after(self, before: Tip) -> Tip:
        """The tip after this job (which was planned at ``before``)."""
        grew = self.end > self.begin
        last = self.last
        if last is None and grew:
            last = tuple(_last(p) for p in self.parts)
        return Tip(
            self.end,
            self.source_counter,
            self.seams,
            known_source=self.source_counter is not None,
            last=before.last if last is None else last,
            tail=self.tail if grew else before.tail,
        )


def _last(part: Any) -> Any:
    """The last timestep of ``part`` ``[rows, n, ...]``: copied out of a numpy array (whose
    memory is reused), as it is of a device array (whose cut is a new array already; sliced
    with a static index, so that nothing moves to the device)."""
    if isinstance(part, np.ndarray):
        return np.array(part[:, -1])
    from jax import lax

    return lax.index_in_dim(part, int(part.shape[1]) - 1, axis=1, keepdims=False)


class BufferView:
    """What a write needs from a buffer state: experience, position, counter, stacking."""

    def __init__(self, state: Any) -> None:
        running = None
        self.derived = False  # the counter derived from the position alone (:meth:`rebased`)
        if not hasattr(state, "write_counter"):
            # a state in the reference's shape (a Flashbax state, or one restored from an
            # orbax checkpoint of a Flashbax run): its counter is derived as the buffers do
            from buffers import BufferError, from_flashbax_state

            running = getattr(state, "running_index", None)
            with contextlib.suppress(BufferError):  # not a buffer state: refused below
                state = from_flashbax_state(state)
                self.derived = True
        if not hasattr(state, "experience") or not hasattr(state, "write_counter"):
            raise VaultStructureError(
                f"write() takes a buffer state from `buffers` (with `experience` and "
                f"`write_counter`), got {type(state).__name__}"
            )
        from buffers import timesteps_added

        # the ring position of the next add: ``current_index`` (replay buffers) or
        # ``write_index`` (queues)
        position = getattr(state, "current_index", None)
        if position is None:
            position = getattr(state, "write_index", None)
        if position is None:
            raise VaultStructureError(
                f"write() needs the buffer's position (`current_index` or `write_index`); "
                f"{type(state).__name__} has neither"
            )
        jax = sys.modules.get("jax")  # a state from a JAX buffer: jax is loaded already
        if jax is not None and isinstance(position, jax.core.Tracer):
            raise VaultStructureError(
                "write() got a state traced by a JAX transformation (inside jit, vmap, scan "
                "or grad), whose values are not known yet: call it outside, on the state the "
                "transformed function returns. Nothing was written."
            )
        current = np.asarray(position)
        self.stack = current.ndim  # leading device/vmap axes folded into rows
        if self.stack and (np.any(current != current.flat[0])):
            raise VaultStructureError(
                "stacked (pmap/vmap) state whose parts are at different time positions: "
                f"current_index={current.tolist()}"
            )
        counter = timesteps_added(state)
        counters = np.asarray(counter, dtype=object).reshape(-1)  # any stacking axes
        if any(c != counters[0] for c in counters):
            raise VaultStructureError(f"stacked state with different write counters {counter}")
        self.counter = int(counters[0])
        self.current = int(current.flat[0]) if current.size else 0
        self.experience = state.experience
        first = first_leaf(state.experience)
        if len(first.shape) < self.stack + 2:
            raise VaultStructureError(
                f"the state's experience leaves must be [rows, time, ...], got shape "
                f"{tuple(first.shape)}{_named(state.experience, 'experience/')}"
            )
        self.time_len = int(first.shape[self.stack + 1])
        self.rows = int(math.prod(first.shape[: self.stack + 1]))
        if not 0 <= self.current < max(self.time_len, 1):
            raise VaultStructureError(
                f"the state's position ({self.current}) is outside its time axis "
                f"[0, {self.time_len}); nothing written"
            )
        self.full = self.counter >= self.time_len
        if self.counter % max(self.time_len, 1) != self.current:
            raise VaultStructureError(
                f"the state's position ({self.current}) disagrees with its write counter "
                f"({self.counter} timesteps added to a time axis of {self.time_len}); "
                "nothing written"
            )
        if running is not None and np.all(np.asarray(running) == self.counter):
            self.derived = False  # a prioritised state's running index: exact

    def rebased(self, source: int | None) -> BufferView:
        """This view, its counter counted on from ``source`` (the vault's record of the
        buffer's counter) where the state has no counter of its own (the reference's shape,
        whose counter is derived from its position: only the fewest timesteps consistent with
        it, which starts again after each wrap): the fewest at least ``source`` that agree
        with the position. Exact when fewer than a ring's worth were added between writes, as
        the reference's own vault assumes; otherwise the vault's check of its last timestep
        tells a buffer that wrapped too far from the one it wrote (never silently)."""
        if not self.derived or not self.full or source is None:
            return self
        t = self.time_len
        least = max(source, t)
        view = copy.copy(self)
        view.counter = least + (self.current - least) % t
        return view

    @property
    def stored(self) -> int:
        """Timesteps per row the buffer holds now."""
        return min(self.counter, self.time_len)

    def leaf(self, value: Any) -> np.ndarray:
        """The whole leaf on the host, ``[rows, T, ...]``."""
        arr = np.asarray(value)
        return arr.reshape((self.rows, self.time_len, *arr.shape[self.stack + 2 :]))

    def window(self, value: Any, start: int, n: int) -> list[Any]:
        """Timesteps ``start, start + 1, ...`` (mod T), ``n`` of them, of one leaf, as pieces
        ``[rows, k, ...]`` in time order: numpy views of a leaf on the host (two where the
        ring wraps), or new device arrays cut on the leaf's accelerator
        (``vault/write/_device.py``)."""
        if _device.on_accelerator(value):
            return _device.cut(value, self.stack + 1, start, n)
        data = self.leaf(value)
        stop = start + n
        if stop <= self.time_len:
            return [data[:, start:stop]]
        # the ring wrapped: the oldest part at the end, the newest at the start
        return [data[:, start:], data[:, : stop - self.time_len]]

    def timestep(self, values: list[Any], counter: int) -> tuple[np.ndarray, ...] | None:
        """The timestep this buffer got as its ``counter``-th add (from 0), one array
        ``[rows, ...]`` per leaf; None when the ring no longer (or not yet) holds it."""
        back = self.counter - counter  # adds since that one, itself included
        if not 0 < back <= self.stored:
            return None
        at = (self.current - back) % self.time_len
        pieces = [self.window(v, at, 1)[0] for v in values]
        return tuple(p[:, 0] for p in _device.to_host(pieces))


class ArraysView:
    """Experience given as arrays ``[rows, n, ...]``: what ``append`` checks and writes."""

    stack = 0

    def __init__(self, experience: Any) -> None:
        first = first_leaf(experience)
        if not hasattr(first, "shape") or len(first.shape) < 2:
            raise VaultStructureError(
                "append() takes array leaves shaped [rows, time, ...], got "
                + (f"shape {tuple(first.shape)}" if hasattr(first, "shape") else repr(first))
                + _named(experience, "experience/")
            )
        self.experience = experience
        self.rows = int(first.shape[0])
        self.time_len = int(first.shape[1])


def _named(tree: Any, prefix: str = "") -> str:
    """`` for leaf 'PATH'``: the path of ``tree``'s first leaf, for a message (empty where
    the structure cannot be described)."""
    try:
        names = _structure.leaf_names(_structure.describe(tree))
    except VaultStructureError:
        return ""
    return f" for leaf {prefix + names[0]!r}" if names else ""


def first_leaf(tree: Any) -> Any:
    """The first array leaf of ``tree``, in the vault's leaf order.

    Found through the vault's own structure walk, so numpy data never imports jax (about
    0.6 s in a fresh process, several seconds when many processes start at once). A container
    only a jax pytree registration knows (which :func:`check_leaves` then refuses with a
    typed error) is walked by jax, which is loaded already wherever such a class exists."""
    try:
        leaves = _structure.leaves(tree, _structure.describe(tree))
    except VaultStructureError as err:
        if "jax" not in sys.modules:
            raise
        import jax

        try:
            leaves = jax.tree_util.tree_leaves(tree)
        except Exception:  # jax cannot walk it either (int and str dict keys): ours says why
            raise err from None
    if not leaves:
        raise VaultStructureError("the experience has no array leaves")
    return leaves[0]


def check_leaves(manifest: Manifest, view: BufferView | ArraysView, where: str) -> list[Any]:
    """The state's leaves in vault order, or a VaultStructureError naming every bad leaf."""
    try:
        node = _structure.describe(view.experience)
    except VaultStructureError as err:
        raise VaultStructureError(f"{where}: {err}") from None
    given = dict(
        zip(_structure.leaf_names(node), _structure.leaves(view.experience, node), strict=True)
    )
    differ = []
    if node != manifest.structure:
        stored = set(manifest.leaf_names)
        differ += [f"experience/{n}: missing from the state" for n in sorted(stored - set(given))]
        differ += [f"experience/{n}: not in the vault" for n in sorted(set(given) - stored)]
        if not differ:
            differ = ["container types differ from the vault's structure"]
    problems = _leaf_problems(manifest, view, given)
    if differ:  # every bad leaf at once: the structure's and the leaves' that are there
        raise VaultStructureError(
            f"{where}: the state's structure differs from the vault's; nothing written",
            differ + problems,
        )
    if problems:
        raise VaultStructureError(
            f"{where}: the state does not match the vault; nothing written", problems
        )
    return [given[name] for name in manifest.leaf_names]


def _leaf_problems(
    manifest: Manifest, view: BufferView | ArraysView, given: dict[str, Any]
) -> list[str]:
    """What is wrong with each leaf of ``given`` (by path) that the vault has: not an array,
    leading axes other than the vault's rows and the time length most leaves agree on, or
    another per-timestep shape or dtype."""
    rows, stack = manifest.rows, view.stack
    leads = {
        name: tuple(int(d) for d in value.shape[: stack + 2])
        for name, value in given.items()
        if _is_array(value) and len(value.shape) >= stack + 2
    }
    times = collections.Counter(lead[-1] for lead in leads.values())
    time = (
        view.time_len
        if times[view.time_len] == max(times.values(), default=0)
        else times.most_common(1)[0][0]
    )
    counts = {math.prod(lead[:-1]) for lead in leads.values()}
    problems = []
    if len(counts) == 1 and rows not in counts:  # every leaf alike: one problem, the rows
        rows = counts.pop()
        problems.append(f"rows: expected {manifest.rows}, got {rows}")
    for leaf in manifest.leaves:
        if leaf.name not in given:
            continue
        value = given[leaf.name]
        expected = ", ".join(map(str, (manifest.rows, "T", *leaf.shape)))
        if not _is_array(value):
            problems.append(
                f"experience/{leaf.name}: expected an array [{expected}] {leaf.dtype}, got "
                f"{type(value).__name__}"
            )
            continue
        lead = leads.get(leaf.name)
        if lead is None or lead[-1] != time or math.prod(lead[:-1]) != rows:
            problems.append(
                f"experience/{leaf.name}: leading axes {list(value.shape[: stack + 2])}, "
                f"expected [rows={rows}, time={time}] (the vault's rows; the time most leaves "
                "have)"
            )
            continue
        shape = tuple(int(d) for d in value.shape[stack + 2 :])
        dtype = np.dtype(value.dtype).name
        if shape != leaf.shape or dtype != leaf.dtype:
            got = ", ".join(map(str, (rows, "T", *shape)))
            problems.append(
                f"experience/{leaf.name}: expected [{expected}] {leaf.dtype}, got [{got}] {dtype}"
            )
    return problems


def _is_array(value: Any) -> bool:
    """A leaf with data: a numpy or JAX array (not a Python number, nor a shape-only
    ``jax.ShapeDtypeStruct``)."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "__array__")


def same_buffer(
    tip: Tip, view: BufferView, values: list[Any], last: Sequence[np.ndarray]
) -> bool | None:
    """Whether ``view`` is the buffer that the tip's counter belongs to: it still holds, at
    that counter, the vault's last timestep ``last``. None: it cannot tell (the ring no longer
    holds that timestep)."""
    source = tip.source_counter
    if source is None or source == 0:
        return None
    if view.counter < source:
        return False
    held = view.timestep(values, source - 1)
    if held is None:
        return None
    return all(
        a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
        for a, b in zip(held, _device.to_host(last), strict=True)
    )


def plan_write(
    tip: Tip,
    view: BufferView,
    values: list[Any],
    *,
    where: str,
    on_overrun: OnOverrun = "error",
    fresh: bool = False,
    new_buffer: bool = False,
    copy: bool = False,
    chunks: Sequence[int] | None = None,
    empty: Empty = np.empty,
) -> AppendJob | None:
    """The append that saves what ``view`` holds beyond ``tip`` (None: nothing new).

    ``fresh``: the buffer is not the one the tip's counter belongs to; everything it holds is
    new. ``new_buffer``: the write said ``new_buffer=True`` (for the overrun's message).
    ``copy``: copy the fresh timesteps out of the buffer (for a write that returns before
    the data is stored; the buffer may be donated or overwritten at once). ``chunks`` (the
    chunk time per leaf): stage the data in whole chunks (``vault.write._stage.stage``, into
    arrays from ``empty``), which copies it too.
    """
    if on_overrun not in ("error", "save_surviving"):
        raise VaultArgumentError(
            f"on_overrun must be 'error' or 'save_surviving', got {on_overrun!r}"
        )
    source = tip.source_counter
    seams = tip.seams
    lost = 0
    restart = None
    if source is None or fresh:
        unsaved = view.stored
        # a buffer written for the first time that has wrapped: what it overwrote before this
        # write never reached the vault; recorded as a seam (as later overruns are)
        lost = view.counter - view.stored
        if lost > 0:
            seams = _with_seam(seams, tip.length, lost)
        elif fresh and tip.length:
            # another buffer than the one before (a new run): its rows do not continue
            # the vault's, so no episode or sequence runs across; where they start is unknown
            seams = _with_seam(seams, tip.length, 0)
            restart = np.zeros(view.rows, bool)
    else:
        if view.counter < source:
            raise VaultStructureError(
                f"{where}: the buffer's write counter ({view.counter}) is behind the vault's "
                f"record of it ({source}): this is not the buffer this vault was written from. "
                "Nothing was written. Pass new_buffer=True to append everything it holds."
            )
        unsaved = view.counter - source
    if unsaved > view.stored:
        lost = unsaved - view.stored
        if on_overrun == "error":
            raise UnsavedDataLostError(
                f"{where}: {unsaved} timesteps per row were added since the last write but the "
                f"buffer holds {view.stored}; {lost} were overwritten before being saved. "
                f"Nothing was written. Write more often (at least every {view.time_len} "
                "timesteps) or pass on_overrun='save_surviving'. "
                + (
                    "With new_buffer=True too: a buffer this far past the vault's last "
                    "timestep is taken for the buffer written last (a new buffer this far on "
                    "had also overwritten timesteps before its first write); "
                    "on_overrun='save_surviving' stores the timesteps it holds."
                    if new_buffer
                    else "If this is not the buffer the vault was last written from (a new "
                    "process, a restarted run), pass new_buffer=True to append everything "
                    "it holds."
                ),
                lost,
            )
        seams = _with_seam(seams, tip.length, lost)
        unsaved = view.stored
    if unsaved == 0 and view.counter == source:
        return None
    start = (view.current - unsaved) % max(view.time_len, 1)
    pieces = [view.window(value, start, unsaved) for value in values] if unsaved else []
    job = AppendJob(tip.length, tip.length + unsaved, (), view.counter, seams, lost > 0, restart)
    return _with_parts(job, tip, pieces, chunks, copy, empty)


def _with_parts(
    job: AppendJob,
    tip: Tip,
    pieces: list[list[np.ndarray]],
    chunks: Sequence[int] | None,
    copy: bool,
    empty: Empty = np.empty,
) -> AppendJob:
    """``job`` with its data: ``pieces`` per leaf (in time order) staged in whole chunks
    (``chunks``: the chunk time per leaf; ``empty``: where the staging arrays come from;
    ``vault.write._stage.stage``), else as they are (``copy``: copied out, in one array per
    leaf).

    Pieces cut on an accelerator (:meth:`BufferView.window`) are copied to the host here,
    unless ``copy`` (a write that returns before the data is stored): then the job is
    ``pending``, to be copied and staged by the background thread. So is any job of a ``copy``
    write planned while an earlier one's staging is pending (its host pieces copied out)."""
    if not pieces:
        return job
    on_device = any(not isinstance(p, np.ndarray) for leaf in pieces for p in leaf)
    tails_pending = isinstance(tip.tail, PendingTails) and not tip.tail.known
    if copy and (on_device or tails_pending):
        held = [[np.array(p) if isinstance(p, np.ndarray) else p for p in leaf] for leaf in pieces]
        tails = PendingTails() if chunks is not None else None

        def pending() -> AppendJob:
            try:
                host = [_device.to_host(leaf) for leaf in held]
                before = dataclasses.replace(tip, tail=known_tails(tip.tail))
                done = _with_parts(job, before, host, chunks, False, empty)
            except BaseException:
                if tails is not None:
                    tails.set(None)
                raise
            if tails is not None:
                tails.set(known_tails(done.tail))
            return done

        last = tuple(_last(leaf[-1]) for leaf in held)
        return dataclasses.replace(job, tail=tails, pending=pending, last=last)
    if on_device:
        pieces = [_device.to_host(leaf) for leaf in pieces]
        copy = False  # copied already
    if chunks is not None:
        parts, staged, tail = stage(tip.length, tip.tail, pieces, chunks, empty)
        return dataclasses.replace(job, parts=parts, staged=staged, tail=tail)
    out = []
    for leaf_pieces in pieces:
        if len(leaf_pieces) > 1:
            out.append(np.concatenate(leaf_pieces, axis=1))
        else:
            out.append(np.array(leaf_pieces[0]) if copy else leaf_pieces[0])
    return dataclasses.replace(job, parts=tuple(out))


def _with_seam(seams: tuple[Seam, ...], at: int, lost: int) -> tuple[Seam, ...]:
    """``seams`` with ``lost`` timesteps lost at ``at`` (merged into a seam already there)."""
    if seams and seams[-1].at == at:
        return (*seams[:-1], Seam(at, seams[-1].lost + lost))
    return (*seams, Seam(at, lost))


def plan_append(
    tip: Tip,
    rows: int,
    parts: list[np.ndarray],
    restart: np.ndarray | None,
    lost: int = 0,
    chunks: Sequence[int] | None = None,
    empty: Empty = np.empty,
) -> AppendJob:
    """The append of arrays given directly (``[rows, n, ...]`` per leaf), after ``lost`` lost
    timesteps; ``restart`` as in :class:`AppendJob`. The buffer counter is forgotten.
    ``chunks``: as for :func:`plan_write`."""
    n = int(parts[0].shape[1]) if parts else 0
    begin = tip.length
    seams = list(tip.seams)
    if lost or (restart is not None and begin > 0):
        # a seam: the timesteps on either side are not consecutive (``lost`` 0: a restart)
        if seams and seams[-1].at == begin:
            seams[-1] = Seam(begin, seams[-1].lost + int(lost))
        else:
            seams.append(Seam(begin, int(lost)))
    if lost:
        restart = np.zeros(rows, bool)
    job = AppendJob(begin, begin + n, (), None, tuple(seams), False, restart)
    return _with_parts(job, tip, [[p] for p in parts] if n else [], chunks, False, empty)
