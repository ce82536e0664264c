"""Argument checks shared by every public function: ints, flags, option names, memory sizes.

The rule for which error: an argument of the wrong *type* (``2.7`` or ``True`` for an int,
``"no"`` for a flag) is :class:`VaultArgumentError` (also a ``TypeError``); a value of the
right type that is out of range is the caller's error type (``VaultReadError`` for reads and
streams, ``VaultArgumentError`` for creation options). Every check is O(1).
"""

from __future__ import annotations

import difflib
import functools
import operator
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from vault._errors import VaultArgumentError, VaultError

FALLBACK_MEMORY_BYTES = 1 << 46  # where the machine's memory cannot be read (64 TiB)


def kind(value: Any) -> str:
    """``'2.7 (a float)'``: a value and its type, for messages."""
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{value!r} ({article} {name})"


INT64_MAX = (1 << 63) - 1
NAME_MAX, PATH_MAX = 255, 4095  # bytes of a file's name, and of a path (Linux)


def index_arg(name: str, value: Any) -> int:
    """``value`` as a Python int: ints, numpy integers and 0-d integer arrays; never a bool, a
    float (``2.0`` included) or a string."""
    if isinstance(value, (bool, np.bool_)):
        raise VaultArgumentError(f"{name} must be an int, got {kind(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise VaultArgumentError(f"{name} must be an int, got {kind(value)}") from None


def int_arg(
    name: str, value: Any, minimum: int, error: type[VaultError] = VaultArgumentError
) -> int:
    """An int ``>= minimum``: a wrong type is VaultArgumentError, a smaller value ``error``."""
    if isinstance(value, (bool, np.bool_)):
        raise VaultArgumentError(f"{name} must be an int >= {minimum}, got {kind(value)}")
    try:
        number = operator.index(value)
    except TypeError:
        raise VaultArgumentError(f"{name} must be an int >= {minimum}, got {kind(value)}") from None
    if number < minimum:
        raise error(f"{name} must be an int >= {minimum}, got {value!r}")
    if number > INT64_MAX:  # past any count or place numpy (and a vault) can hold
        raise error(f"{name} must be at most {INT64_MAX} (2**63 - 1), got {value!r}")
    return number


def bool_arg(name: str, value: Any) -> bool:
    """A flag: ``True``/``False`` (numpy's too). A string such as ``"False"`` is truthy, so it
    is refused rather than read as true."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise VaultArgumentError(f"{name} must be True or False, got {kind(value)}")


def finite_arg(name: str, value: Any) -> float:
    """A finite real number (a filter bound, for instance)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise VaultArgumentError(f"{name} must be a number, got {kind(value)}")
    number = float(value)
    if not np.isfinite(number):
        raise VaultArgumentError(
            f"{name} must be a finite number, got {value!r}: a NaN bound selects nothing; "
            "leave it None for no bound"
        )
    return number


def path_arg(name: str, value: Any, what: str = "a path") -> str:
    """``value`` (a str or an ``os.PathLike`` of one) as a str; anything else is
    :class:`VaultArgumentError` naming the argument (``what``: what it should name)."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise VaultArgumentError(f"{name}: expected {what} (a str or path), got {kind(value)}")
    if "\0" in text:
        raise VaultArgumentError(f"{name}: expected {what}, got {text!r}, which holds a NUL")
    longest = max((len(os.fsencode(part)) for part in text.split("/")), default=0)
    if "://" not in text and (longest > NAME_MAX or len(os.fsencode(text)) > PATH_MAX):
        raise VaultArgumentError(
            f"{name}: expected {what}, got a path of {len(text)} characters that no file "
            f"system holds (a name is at most {NAME_MAX} bytes, a path {PATH_MAX})"
        )
    return text


def str_arg(name: str, value: Any, optional: bool = False) -> Any:
    """``value`` as a str (None too, with ``optional``): a name, a mode or a leaf path. A
    wrong type is :class:`VaultArgumentError` naming the argument (an array would otherwise
    meet ``in`` and ``==`` tests with numpy's semantics)."""
    if isinstance(value, str) or (optional and value is None):
        return value
    expected = "a str or None" if optional else "a str"
    raise VaultArgumentError(f"{name} must be {expected}, got {kind(value)}")


def callable_arg(name: str, value: Any) -> Any:
    """None or a callable (a progress callback)."""
    if value is not None and not callable(value):
        raise VaultArgumentError(f"{name} must be a function or None, got {kind(value)}")
    return value


def known_options(function: str, given: Iterable[str], accepted: Callable[..., Any]) -> None:
    """Refuse keyword options that ``accepted`` does not take, with the closest valid name."""
    import inspect

    params = inspect.signature(accepted).parameters
    names = [p.name for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(given) - set(names))
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, names, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise VaultArgumentError(
        f"{function}: unknown option {', '.join(hints)}; the options are {sorted(names)}"
    )


def once(value: Any) -> Any:
    """A one-shot iterable (a generator, ``iter(...)``) given as a selection (``rows``,
    ``leaves``) as a list, read once here, since the selection is checked and then used (and
    a spent iterator would then select nothing); anything else as it is."""
    if value is None or isinstance(value, (str, bytes, slice, dict, set, frozenset)):
        return value
    if hasattr(value, "__iter__") and not hasattr(value, "__len__"):
        return list(value)
    return value


@functools.cache
def memory_bytes() -> int:
    """The machine's physical memory (a fixed 64 TiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MEMORY_BYTES


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units (``'1.8 PiB'``)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    size, i = float(n), 0
    while size >= 1024 and i < len(units) - 1:
        size, i = size / 1024, i + 1
    return f"{n} B" if i == 0 else f"{size:.1f} {units[i]}"


def check_memory(what: str, nbytes: int, fix: str, error: type[VaultError]) -> None:
    """Refuse, before anything is allocated, a request for more bytes than the machine has
    (numpy would raise a bare MemoryError, or the system would start swapping)."""
    limit = memory_bytes()
    if nbytes > limit:
        raise error(
            f"{what} would allocate {human_bytes(nbytes)} ({nbytes} bytes), more than this "
            f"machine's memory ({human_bytes(limit)}); {fix}"
        )
