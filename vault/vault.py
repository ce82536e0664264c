"""The reference's vault module (``flashbax.vault.vault``) under its own name.

Code that imports from it runs with ``from vault.vault import ...`` (and ``from flashbax.vault
import Vault`` becomes ``from vault import Vault``). The constants hold this package's values
for what the reference's describe: where the metadata lives, the default compression, the
format version and the longest time axis. Loading this module loads the Vault (TensorStore).
"""

from __future__ import annotations

from typing import Any

from buffers.trajectory_buffer import Experience, TrajectoryBufferState
from buffers.utils import get_tree_shape_prefix
from vault.facade._vault import Vault
from vault.format._records import FORMAT_VERSION, MANIFEST_KEY

DRIVER = "file://"
"""The URL scheme of a local vault: ``rel_dir`` may be a plain path or ``file://`` + a path
(other locations: ``memory://``, ``s3://``)."""

METADATA_FILE = MANIFEST_KEY
"""The file, at a vault's root, that holds its manifest (structure, shapes, dtypes, codecs and
your ``metadata``): the root Zarr group's ``zarr.json``."""

TIME_AXIS_MAX_LENGTH = (1 << 62) - 1
"""The longest time axis a vault can hold: TensorStore's largest finite index (``ts.inf``).
Arrays grow by resizing as data arrives; this is a bound, never an allocation."""

COMPRESSION_DEFAULT: dict[str, Any] = {"id": "auto", "level": None}
"""The ``compression`` that ``Vault(...)`` uses when given none: per leaf, zstd level 3 for
one-byte data and blosc (zstd level 1, byte shuffle) for wider numbers. Give ``{"id": "zstd",
"level": 5}`` (or ``"gzip"``, ``"lz4"``, ``"blosc"``) for one codec everywhere."""

VERSION = FORMAT_VERSION
"""The newest version of the on-disk format this package writes (older ones still open).

A vault is written as version 3 unless one of its leaves' chunks cuts the item axes, which
makes it version 4 (docs: Format specification, "Format versions")."""

__all__ = [
    "COMPRESSION_DEFAULT",
    "DRIVER",
    "METADATA_FILE",
    "TIME_AXIS_MAX_LENGTH",
    "VERSION",
    "Experience",
    "TrajectoryBufferState",
    "Vault",
    "get_tree_shape_prefix",
]
