"""D4RL-style HDF5 files -> vault (needs ``h5py``: ``pip install "rlvault[d4rl]"``).

The flat layout of D4RL (and of the many datasets that copy it): one HDF5 file whose datasets
``observations``, ``actions``, ``rewards``, ``terminals`` and (D4RL v2 onwards) ``timeouts``,
optionally ``next_observations`` and a group ``infos/`` of per-timestep datasets, all of the
same length ``N``: every episode of the dataset, concatenated. An episode ends at a step whose
``terminals`` or ``timeouts`` flag is set; the last one may have neither (the collection
stopped mid-episode).

The vault has one row of ``N`` timesteps with those leaves (``infos/<name>`` nested under
``infos``), their dtypes unchanged, and an episode index with ``terminals`` as the done leaf,
``timeouts`` as the truncated leaf and ``rewards`` as the reward leaf: the episodes are the
file's exactly, the unterminated last one as the row's open episode
(``vault.episodes(include_open=True)``). Other datasets and groups (``metadata/*`` and the
like, which are not per timestep) are not imported; their names are recorded in the vault's
metadata under ``imported_from.skipped``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from vault._args import path_arg
from vault._errors import VaultCorruptError, VaultNotFoundError, VaultStructureError
from vault.converters._sink import (
    BLOCK_BYTES,
    Progress,
    check_common,
    new_vault,
    pump,
    require,
    time_blocks,
)
from vault.facade._vault import Vault
from vault.storage._kinds import LocationLike

REQUIRED = ("observations", "actions", "rewards", "terminals")
OPTIONAL = ("timeouts", "next_observations")
INFOS = "infos"


def import_d4rl(
    source: str | os.PathLike[str],
    dest: LocationLike,
    *,
    codec: str | None = "auto",
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Vault:
    """Import a D4RL-style HDF5 file as a new one-row vault with an episode index.

    The file holds ``observations``, ``actions``, ``rewards``, ``terminals`` and
    ``timeouts`` (see the module docstring for the layout). Nothing is left at ``dest`` if
    the import fails or is interrupted.

    Args:
        source: the HDF5 file.
        dest: the new vault's location; it must not exist.
        codec: the new vault's codec, as in :meth:`vault.Vault.create`.
        block_bytes: the raw bytes read at a time (memory stays about two blocks).
        progress: called as ``progress(bytes imported, total bytes)`` after every block.

    Returns:
        The new vault, opened read-only.

    Raises:
        VaultArgumentError: ``block_bytes`` not an int >= 65536, or ``progress`` neither
            callable nor None.
        VaultNotFoundError: no such file.
        VaultCorruptError: a file h5py cannot open (not HDF5, or damaged).
        VaultStructureError: an HDF5 file that is not D4RL-style: ``observations``,
            ``actions``, ``rewards`` or ``terminals`` missing (or a group, not a dataset), or
            per-timestep datasets that are scalars, of other lengths than ``observations``
            or not bool/integer/floating-point (every problem is listed).
        VaultDependencyError: h5py is missing (``pip install "rlvault[d4rl]"``).
        VaultExistsError: something is at ``dest`` already.
    """
    block_bytes = check_common(block_bytes, progress)
    h5py = require("h5py", "d4rl", "d4rl")

    path = Path(path_arg("source", source, "a D4RL-style HDF5 file")).expanduser().absolute()
    if not path.is_file():
        raise VaultNotFoundError(f"{path}: expected a D4RL-style HDF5 file, got no such file")
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise VaultCorruptError(
            f"{path}: expected an HDF5 file, got one h5py cannot open ({err})"
        ) from None
    with handle:
        names, skipped = _timestep_datasets(handle, path)
        datasets = {name: handle[name] for name in names}
        length = int(datasets["observations"].shape[0])
        example: dict[str, Any] = {}
        for name, ds in datasets.items():
            _put(example, name, np.zeros(ds.shape[1:], ds.dtype))
        step = sum(math.prod(ds.shape[1:]) * ds.dtype.itemsize for ds in datasets.values())
        metadata = {
            "imported_from": {
                "format": "d4rl",
                "source": str(path),
                "timesteps": length,
                "skipped": skipped,
            }
        }
        roles = {
            "done": "terminals",
            "truncated": "timeouts" if "timeouts" in datasets else None,
            "reward": "rewards",
        }

        def read(t0: int, t1: int) -> dict[str, Any]:
            tree: dict[str, Any] = {}
            for name, ds in datasets.items():
                _put(tree, name, ds[t0:t1][None])
            return tree

        with new_vault(
            dest, example, rows=1, codec=codec, metadata=metadata, episodes=roles
        ) as out:
            pump(out, *time_blocks(read, length, step, block_bytes), progress)
    return Vault.open(dest)


def _timestep_datasets(handle: Any, path: Path) -> tuple[list[str], list[str]]:
    """The per-timestep datasets to import (checked: present, numeric, all of one length) and
    the names of everything else in the file."""
    import h5py

    problems = [
        f"{name}: expected a dataset [N, ...], got "
        + ("nothing" if name not in handle else type(handle[name]).__name__)
        for name in REQUIRED
        if not isinstance(handle.get(name), h5py.Dataset)
    ]
    if not problems and handle["observations"].ndim == 0:  # it sets the timestep count
        problems.append("observations: expected a dataset [N, ...], got a scalar")
    names = [n for n in (*REQUIRED, *OPTIONAL) if isinstance(handle.get(n), h5py.Dataset)]
    infos = handle.get(INFOS)
    if isinstance(infos, h5py.Group):
        found: list[str] = []
        infos.visititems(
            lambda name, obj: (
                found.append(f"{INFOS}/{name}") if isinstance(obj, h5py.Dataset) else None
            )
        )
        names += sorted(found)
    if problems:
        raise VaultStructureError(f"{path}: not a D4RL-style file", problems)
    length = handle["observations"].shape[0] if handle["observations"].ndim else None
    for name in names:
        ds = handle[name]
        if ds.ndim == 0 or ds.shape[0] != length:
            got = "a scalar" if ds.ndim == 0 else f"{ds.shape[0]} ({list(ds.shape)})"
            problems.append(f"{name}: expected {length} timesteps (as observations), got {got}")
        elif ds.dtype.kind not in "biuf":
            problems.append(
                f"{name}: expected bool, integer or floating-point data, got {ds.dtype}"
            )
    if problems:
        raise VaultStructureError(f"{path}: datasets that cannot be imported", problems)
    everything: list[str] = []
    handle.visititems(
        lambda name, obj: everything.append(name) if isinstance(obj, h5py.Dataset) else None
    )
    return names, sorted(set(everything) - set(names))


def _put(tree: dict[str, Any], name: str, value: Any) -> None:
    *parents, last = name.split("/")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
