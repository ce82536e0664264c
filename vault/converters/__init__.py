"""Converters between vaults and other offline-RL formats, one private module per format.

Flashbax/og-marl vaults, Minari (HDF5 or Arrow), D4RL HDF5, OGBench ``.npz``, RLDS (TFDS).

Each streams (about two blocks of ``block_bytes`` in memory), writes through :class:`vault.Vault`
at any location and leaves nothing behind when it fails; :func:`import_dataset` and
:func:`export_dataset` pick one by format name (:data:`IMPORT_FORMATS`, :data:`EXPORT_FORMATS`).
A converter's module and its optional dependency load on first use.

May use the public API (``vault.facade``, ``vault.derive``) and everything below it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vault._errors import VaultArgumentError

if TYPE_CHECKING:
    from vault.converters._d4rl import import_d4rl
    from vault.converters._flashbax import import_flashbax
    from vault.converters._minari import datasets_root, export_minari, import_minari
    from vault.converters._ogbench import import_ogbench, ogbench_dataset
    from vault.converters._rlds import import_rlds

IMPORTERS = {
    "flashbax": ("vault.converters._flashbax", "import_flashbax"),
    "minari": ("vault.converters._minari", "import_minari"),
    "d4rl": ("vault.converters._d4rl", "import_d4rl"),
    "ogbench": ("vault.converters._ogbench", "import_ogbench"),
    "rlds": ("vault.converters._rlds", "import_rlds"),
}
EXPORTERS = {
    "minari": ("vault.converters._minari", "export_minari"),
}
IMPORT_FORMATS = tuple(IMPORTERS)
"""The formats :func:`import_dataset` reads (``vault import`` lists them)."""
EXPORT_FORMATS = tuple(EXPORTERS)
"""The formats :func:`export_dataset` writes (``vault export`` adds its numpy formats)."""
_LAZY = {name: module for module, name in [*IMPORTERS.values(), *EXPORTERS.values()]}
_LAZY["datasets_root"] = "vault.converters._minari"
_LAZY["ogbench_dataset"] = "vault.converters._ogbench"

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "converter",
    "datasets_root",
    "export_dataset",
    "export_minari",
    "import_d4rl",
    "import_dataset",
    "import_flashbax",
    "import_minari",
    "import_ogbench",
    "import_rlds",
    "ogbench_dataset",
]


def converter(fmt: str, direction: str = "import") -> Any:
    """Returns the function that converts a format in a direction.

    A missing optional dependency is :class:`~vault.VaultDependencyError` when the function
    is called, not here.

    Args:
        fmt: a format name, one of :data:`IMPORT_FORMATS` (``direction="import"``) or
            :data:`EXPORT_FORMATS` (``direction="export"``).
        direction: ``"import"`` (default) or ``"export"``.

    Returns:
        The converter, ``import_<fmt>`` or ``export_<fmt>`` (its module is loaded here).

    Raises:
        VaultArgumentError: ``direction`` is not ``"import"`` or ``"export"``, ``fmt`` is not
            a string, or ``fmt`` is not a format of that direction (each message names the
            argument, the accepted values and the value given).
    """
    from vault._args import kind  # (numpy: not imported by `vault --help`)

    directions = {"import": IMPORTERS, "export": EXPORTERS}
    if not isinstance(direction, str) or direction not in directions:
        raise VaultArgumentError(
            f"direction: expected one of {', '.join(directions)}, got {kind(direction)}"
        )
    table = directions[direction]
    if not isinstance(fmt, str):
        raise VaultArgumentError(
            f"fmt: expected a format name (a str), one of {', '.join(table)}, got {kind(fmt)}"
        )
    if fmt not in table:
        raise VaultArgumentError(
            f"fmt: unknown {direction} format {fmt!r}; expected one of {', '.join(table)}"
        )
    module, name = table[fmt]
    return getattr(importlib.import_module(module), name)


def import_dataset(fmt: str, source: Any, dest: Any, **options: Any) -> Any:
    """Import ``source`` in format ``fmt`` as a new vault: ``import_<fmt>(source, dest, ...)``.

    Args:
        fmt: one of :data:`IMPORT_FORMATS`.
        source: what the importer reads (a directory, a file, a dataset id).
        dest: the new vault's location.
        **options: the importer's options (see :func:`import_flashbax` and the others).

    Returns:
        The new vault, opened read-only.

    Raises:
        VaultArgumentError: ``fmt`` is not a string or not one of :data:`IMPORT_FORMATS`,
            or an option the importer does not take (and whatever the importer raises).
    """
    return _call(converter(fmt, "import"), source, dest, options)


def export_dataset(fmt: str, source: Any, dest: Any, **options: Any) -> Any:
    """Export the vault ``source`` in format ``fmt``: ``export_<fmt>(source, dest, ...)``.

    Args:
        fmt: one of :data:`EXPORT_FORMATS`.
        source: the vault (or its location).
        dest: where to write (for Minari, the dataset id).
        **options: the exporter's options (see :func:`export_minari`).

    Returns:
        What the exporter returns (for Minari, the dataset's directory).

    Raises:
        VaultArgumentError: ``fmt`` is not a string or not one of :data:`EXPORT_FORMATS`,
            or an option the exporter does not take (and whatever the exporter raises).
    """
    return _call(converter(fmt, "export"), source, dest, options)


def _call(fn: Any, source: Any, dest: Any, options: dict[str, Any]) -> Any:
    """``fn(source, dest, **options)``, an option ``fn`` does not take refused by name."""
    from vault._args import known_options

    known_options(fn.__name__, options, fn)
    return fn(source, dest, **options)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vault.converters' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
