"""Named fault-injection points of the commit protocol (crash trials, durability tests).

The commit protocol (``vault/write/_commit.py``) runs each step of an append through
:func:`run_point`. With no hook set that is a plain call. A hook installed with
:func:`set_fault_hook` is called as ``hook(point, info, step)`` and must call ``step()``
exactly once and return its result; around it, it may print markers, start a timer that kills
the process while the step is in flight, or raise to simulate a failed step.

Points, in the order an append runs them:

* ``"append"``: the whole append job; ``info = {"begin", "end"}``.
* ``"resize"``: growing the arrays' time axis, only when at least one array must grow;
  ``info = {"length": needed length, "shapes": {leaf: current time length}}``.
* ``"grow"``: inside ``"resize"`` (and inside ``"index"`` for the episode-index arrays), once
  per array that must grow, starting that array's resize; ``info = {"key": its key,
  "size": the new length}``. A failure here leaves some arrays grown and others not, as a
  full disk can; the arrays already started are awaited before the failure propagates. (On a remote
  location every array's metadata is written together, at ``"resize"``.)
* ``"index"``: writing episode-index entries; ``info = {"count", "new_count"}``.
* ``"tags"``: from format 5, writing the place tags that the commit record kept to an array's
  tag array, once more than ``PENDING_MAX`` of its are held (``vault/format/_tags.py``), once per
  such array; ``info = {"key": its key, "from": the first time chunk, "count": tags}``. On a
  local file system the step waits for the write; on a remote location it starts the tag
  chunks' PUTs, which the append awaits with its chunks.
* ``"commit"``: replacing the commit record; ``info = {"length": new committed length}``.
* ``"trim"``: as a writer closes, cutting the arrays' shapes down to the committed length
  (and the episode index to the indexed count), only when one runs past it;
  ``info = {"length", "episodes"}``.
* ``"fence"``: only where the writer lock is a lease (object stores), once when a writer
  starts: rewriting the commit record so that an earlier holder cannot commit; ``info = {}``.
* ``"create"``: not an append's: ``Vault.create`` publishing the new vault's manifest, the
  last step of a creation (its arrays, groups and empty commit record are made); ``info = {}``.
  A creation stopped before it is taken over by the next ``Vault.create`` there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from vault._errors import VaultArgumentError

R = TypeVar("R")
FaultHook = Callable[[str, dict[str, Any], Callable[[], Any]], Any]
"""The type of a fault hook: ``hook(point, info, step)``, see :func:`set_fault_hook`."""
FAULT_POINTS = ("append", "resize", "grow", "index", "tags", "commit", "trim", "fence", "create")
"""The fault points, in the order an append runs them.

``"append"`` (the whole append job), ``"resize"`` (growing the arrays' time axis),
``"grow"`` (each array that must grow, on a local file system), ``"index"`` (writing
episode-index entries), ``"tags"`` (writing the place tags the commit record kept to a tag
array), ``"commit"`` (replacing the commit record), ``"trim"`` (a closing
writer cutting shapes to the committed length), ``"fence"`` (a new holder of a lease
rewriting the commit record).
"""

_hook: FaultHook | None = None


def set_fault_hook(hook: FaultHook | None) -> FaultHook | None:
    """Install a fault hook for every vault of this process (crash and durability tests).

    The commit protocol runs each of its steps (:data:`FAULT_POINTS`) through the hook, which
    is called as ``hook(point, info, step)`` and must call ``step()`` exactly once and return
    its result; around it, it may print markers, start a timer that kills the process while
    the step is in flight, or raise to simulate a failed step.

    Args:
        hook: the hook, or ``None`` to remove it.

    Returns:
        The previous hook (``None`` if there was none).

    Raises:
        VaultArgumentError: ``hook`` neither callable nor ``None`` (the hook is unchanged).

    Examples:
        >>> import vault
        >>> seen = []
        >>> def hook(point, info, step):
        ...     seen.append(point)
        ...     return step()
        >>> vault.set_fault_hook(hook) is None
        True
        >>> vault.set_fault_hook(None) is hook
        True
    """
    global _hook
    if hook is not None and not callable(hook):
        raise VaultArgumentError(
            f"hook must be callable as hook(point, info, step), or None, got "
            f"{type(hook).__name__} {hook!r}"
        )
    previous, _hook = _hook, hook
    return previous


def run_point(point: str, info: dict[str, Any], step: Callable[[], R]) -> R:
    """Run ``step`` as fault point ``point`` (through the hook, when one is set)."""
    hook = _hook
    if hook is None:
        return step()
    result: R = hook(point, info, step)
    return result
