"""OGBench dataset files -> vault (numpy only: no extra to install, nothing is downloaded).

**The file.** An OGBench dataset is a ``.npz`` file (``<name>.npz``, with its validation split
``<name>-val.npz`` beside it) of arrays of one length ``N``: every trajectory of the dataset,
concatenated. ``observations`` ``[N, ...]`` (float32, or uint8 for the visual datasets),
``actions`` ``[N, ...]``, ``terminals`` ``[N]`` (1 at the *last state* of each trajectory: a
trajectory of ``L`` transitions holds ``L + 1`` states ``s0 .. sL``, and the action stored
beside ``sL`` has no next state), and, where the environment records them, ``qpos``,
``qvel`` and ``button_states`` (OGBench's ``add_info`` fields).

**The vault.** One row of ``N`` timesteps holding every per-timestep array of the file under
its own name, dtype unchanged (``vault.read_numpy()`` gives back the file's arrays
bit-identical), and an episode index with ``terminals`` as the done leaf: the vault's episodes
are the file's trajectories, each ``L + 1`` timesteps long. Arrays that are not per timestep
are not imported; their names are recorded under ``imported_from.skipped``. The file is read a
block at a time straight from the zip (compressed or not), so memory stays at about two blocks
of ``block_bytes`` whatever the file's size; each member's CRC-32 is checked at its end.

**The validation file** becomes a second vault, ``<dest>-val`` by default (as OGBench names its
file), not a shard of a dataset: a dataset's shards are read as one, which would mix the
validation split into the training data.

**OGBench's derived fields** are not stored; :func:`ogbench_dataset` recomputes them from the
vault exactly as ``ogbench.load_dataset`` does (bit-identical; checked in the tests against
``ogbench`` itself):

* ``next_observations`` (regular layout): ``observations[t + 1]`` within a trajectory; the
  last state of each trajectory is dropped from ``observations``, ``actions`` and the info
  fields, and ``terminals`` becomes 1 at the last transition of each trajectory.
* ``valids`` (compact layout, no ``next_observations``): ``1 - terminals``; ``terminals``
  becomes 1 at the last two states of each trajectory.
* ``rewards`` and ``masks`` exist only for OGBench's single-task variants, where OGBench
  computes them from ``qpos``/``button_states`` and the task of a live environment
  (``ogbench.relabel_utils.relabel_dataset``): they are neither stored nor recomputed here;
  call ``relabel_dataset`` on ``ogbench_dataset(vault, add_info=True)``.
"""

from __future__ import annotations

import contextlib
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from vault._args import bool_arg, kind, path_arg
from vault._errors import (
    VaultArgumentError,
    VaultCorruptError,
    VaultError,
    VaultNotFoundError,
    VaultStructureError,
)
from vault.converters._sink import (
    BLOCK_BYTES,
    Progress,
    check_common,
    new_vault,
    opened,
    pump,
    time_blocks,
)
from vault.facade._vault import Vault
from vault.format._records import MANIFEST_KEY
from vault.storage._kinds import LocationLike, parse_location

REQUIRED = ("observations", "actions", "terminals")
INFO = ("qpos", "qvel", "button_states")
DATASET_DIR = "~/.ogbench/data"
VAL_SUFFIX = "-val"


@dataclass(frozen=True)
class Member:
    """One ``.npy`` array inside the ``.npz``: its key, shape, dtype and memory order, read from
    the member's header."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran: bool

    @property
    def step_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize


def import_ogbench(
    source: str | os.PathLike[str],
    dest: LocationLike,
    *,
    val_dest: LocationLike | bool = True,
    dataset_dir: str | os.PathLike[str] = DATASET_DIR,
    codec: str | None = "auto",
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Vault:
    """Import an OGBench dataset file (and its validation file) as a new vault.

    The vault at ``dest`` holds the OGBench dataset file ``source``; it is returned opened
    read-only. See the module docstring for the layout.

    Args:
        source: the ``.npz`` file, or a dataset name (``"antmaze-large-navigate-v0"``) looked
            up as ``<dataset_dir>/<name>.npz``. Never downloaded.
        dest: where the new vault goes (a path or URL; must not exist).
        val_dest: the validation file ``<name>-val.npz`` beside ``source`` goes to a second
            vault: ``True`` (default) at ``<dest>-val`` when the file exists (``dest`` a path
            or URL), a location to put it there (the file must then exist), ``False`` to skip
            it. A ``source`` that is itself a ``-val.npz`` file has no validation file.
        dataset_dir: where dataset names are looked up (OGBench's default download folder).
        codec: the vault's compression (``"auto"``, a codec name, or None).
        block_bytes: about how many raw bytes are read at a time (memory: about two blocks).
        progress: called with (raw bytes imported, total raw bytes) after every block; the
            validation file counts after the training file.

    Returns:
        The training vault, opened read-only (the validation vault is
        ``Vault.open(val_dest)``).

    Raises:
        VaultArgumentError: ``source`` or ``dataset_dir`` not a str or path, ``val_dest``
            given for a file that is itself a validation file, ``block_bytes`` not an int
            >= 65536, or ``progress`` neither callable nor None.
        VaultNotFoundError: no such file (or no validation file where one was asked for).
        VaultCorruptError: not a zip of ``.npy`` arrays, or a member fails its CRC-32.
        VaultStructureError: required arrays missing, of different lengths or not numeric.

    Nothing is left at ``dest`` (or ``val_dest``) if the import fails or is interrupted.
    """
    block_bytes = check_common(block_bytes, progress)
    path = dataset_path(source, dataset_dir)
    val = _val_target(path, dest, val_dest)
    files = [(path, dest)] + ([] if val is None else [val])
    if val is not None:
        _drop_orphan(val[0], val[1], dest)
    published = [False]  # the validation vault was published (and the training one may not)
    try:
        _build(files, val, published, codec, block_bytes, progress)
    except BaseException:
        if published[0] and val is not None:  # not left without its training vault
            with contextlib.suppress(Exception):
                parse_location(val[1]).clear()
        raise
    return Vault.open(dest)


def _build(
    files: list[tuple[Path, LocationLike]],
    val: tuple[Path, LocationLike] | None,
    published: list[bool],
    codec: str | None,
    block_bytes: int,
    progress: Progress | None,
) -> None:
    with contextlib.ExitStack() as stack:
        opened = [stack.enter_context(NpzReader(p)) for p, _ in files]
        sizes = [r.total_bytes for r in opened]
        total = sum(sizes)
        # the validation vault is built inside the training vault's build: it is published
        # first, and a failure anywhere leaves neither
        for i, (reader, (p, target)) in enumerate(zip(opened, files, strict=True)):
            origin: dict[str, Any] = {
                "format": "ogbench",
                "source": str(p),
                "split": "val" if p.stem.endswith(VAL_SUFFIX) else "train",
                "timesteps": reader.length,
                "skipped": reader.skipped,
            }
            if i == 0 and val is not None:
                origin["validation"] = _text(val[1])
            if i == 1:  # left right after the validation vault's block: was it published?
                stack.push(lambda kind, *_: published.__setitem__(0, kind is None))
            out = stack.enter_context(
                new_vault(
                    target,
                    reader.example(),
                    rows=1,
                    codec=codec,
                    metadata={"imported_from": origin},
                    episodes={"done": "terminals", "truncated": None, "reward": None},
                )
            )
            blocks = time_blocks(reader.read, reader.length, reader.step_bytes, block_bytes)
            pump(out, *blocks, _offset(progress, sum(sizes[:i]), total))


def _drop_orphan(val_file: Path, val_dest: LocationLike, dest: LocationLike) -> None:
    """Remove the validation vault an interrupted import of this same file left without its
    training vault (published last, the import's commit point), so the import runs again.
    Anything else at ``val_dest`` stays, and the build refuses it."""
    if parse_location(dest).read(MANIFEST_KEY) is not None:
        return
    try:
        left = Vault.open(val_dest)
    except VaultError:
        return
    origin = left.metadata.get("imported_from")
    left.close()
    if isinstance(origin, dict) and (origin.get("format"), origin.get("source")) == (
        "ogbench",
        str(val_file),
    ):
        parse_location(val_dest).clear()


def _offset(progress: Progress | None, before: int, total: int) -> Progress | None:
    if progress is None:
        return None
    return lambda done, _total: progress(before + done, total)


def dataset_path(source: str | os.PathLike[str], dataset_dir: str | os.PathLike[str]) -> Path:
    """The ``.npz`` file ``source`` names: a path, or a dataset name in ``dataset_dir``
    (either not a str or path: :class:`VaultArgumentError`)."""
    text = path_arg("source", source, "a .npz path or an OGBench dataset name")
    folder = path_arg("dataset_dir", dataset_dir, "a folder")
    path = Path(text).expanduser()
    if path.is_file():
        return path.absolute()
    named = Path(folder).expanduser() / f"{text}.npz"
    if path.suffix != ".npz" and named.is_file():
        return named.absolute()
    raise VaultNotFoundError(
        f"{text}: expected an OGBench dataset file (a .npz path, or a dataset "
        f"name with {named} present), got no such file; OGBench's "
        "ogbench.download_datasets([name]) fetches one (rlvault never downloads)"
    )


def _dtype_arg(name: str, value: Any) -> np.dtype[Any]:
    """``value`` as a numeric numpy dtype (bool, integer or floating-point)."""
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        raise VaultArgumentError(
            f"{name}: expected a bool, integer or floating-point numpy dtype (np.float32, "
            f"np.uint8, np.int32, ...), got {kind(value)}"
        )
    return dtype


def _val_target(
    path: Path, dest: LocationLike, val_dest: LocationLike | bool
) -> tuple[Path, LocationLike] | None:
    if val_dest is False or path.stem.endswith(VAL_SUFFIX):
        if val_dest not in (True, False):
            raise VaultArgumentError(
                f"val_dest: {path.name} is a validation file itself; it has no validation file"
            )
        return None
    val = path.with_name(f"{path.stem}{VAL_SUFFIX}.npz")
    if val_dest is True:
        if not val.is_file():
            return None
        if not isinstance(dest, (str, os.PathLike)):
            raise VaultArgumentError(
                f"val_dest: {val.name} is beside {path.name}; name its vault's location "
                "(val_dest=...) or skip it (val_dest=False): dest is not a path or URL"
            )
        # beside the training vault as parsed: absolute, and "o/." names "o", not inside it
        return val, f"{str(parse_location(dest, argument='dest')).rstrip('/')}{VAL_SUFFIX}"
    if not val.is_file():
        raise VaultNotFoundError(
            f"{val}: expected the validation file beside {path.name} (val_dest was given), "
            "got no such file; pass val_dest=False to import only the training file"
        )
    return val, val_dest


def _text(location: LocationLike) -> Any:
    """A location as recorded: a path or URL as parsed (absolute, found from anywhere)."""
    if isinstance(location, (str, os.PathLike)):
        return str(parse_location(location, argument="val_dest"))
    return str(location)


class NpzReader:
    """An ``.npz`` file's per-timestep arrays read in blocks of timesteps, straight from the
    zip: one sequential stream per member, so each block costs its own size in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            raise VaultCorruptError(
                f"{path}: expected a .npz file (a zip of .npy arrays), got one that cannot be "
                f"opened ({err})"
            ) from None
        self.streams: dict[str, IO[bytes]] = {}
        try:
            self.members, self.skipped = self._members()
        except BaseException:
            self.close()
            raise
        self.length = self.members[0].shape[0]
        self.step_bytes = sum(m.step_bytes for m in self.members)
        self.total_bytes = self.length * self.step_bytes

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self.zip.close()

    def example(self) -> dict[str, np.ndarray]:
        """One timestep of zeros, shaped and typed like the arrays."""
        return {m.key: np.zeros(m.shape[1:], m.dtype) for m in self.members}

    def read(self, t0: int, t1: int) -> dict[str, np.ndarray]:
        """Timesteps ``[t0, t1)`` of every array as ``[1, t1 - t0, ...]``; blocks must be read
        in order (the members are streams)."""
        out = {}
        for m in self.members:
            stream = self.streams[m.key]
            want = (t1 - t0) * m.step_bytes
            try:
                data = stream.read(want)
                if t1 == self.length:
                    stream.read(1)  # at the end: the zip checks the member's CRC-32 here
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
                raise VaultCorruptError(
                    f"{self.path}: member {m.key}.npy is damaged ({err}); the file is corrupt "
                    "(download it again)"
                ) from None
            if len(data) != want:
                raise VaultCorruptError(
                    f"{self.path}: member {m.key}.npy: expected {want} bytes for timesteps "
                    f"[{t0}, {t1}), got {len(data)}; the file is truncated"
                )
            out[m.key] = np.frombuffer(data, m.dtype).reshape(1, t1 - t0, *m.shape[1:])
        return out

    def _members(self) -> tuple[list[Member], list[str]]:
        headers = {}
        for info in self.zip.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[: -len(".npy")]
            stream = self.zip.open(info)
            self.streams[key] = stream
            headers[key] = _header(stream, self.path, key)
        problems = [
            f"{key}: expected an array [N, ...], got nothing"
            for key in REQUIRED
            if key not in headers
        ]
        if not problems and not headers["observations"].shape:  # it sets the timestep count
            problems.append("observations: expected an array [N, ...], got a scalar")
        if problems:
            raise VaultStructureError(f"{self.path}: not an OGBench dataset file", problems)
        length = headers["observations"].shape[0]
        chosen, skipped = [], []
        for key, m in headers.items():
            known = key in REQUIRED or key in INFO
            per_step = bool(m.shape) and m.shape[0] == length
            if not known and not (per_step and m.dtype.kind in "biuf"):
                skipped.append(key)
            elif not per_step:
                got = "a scalar" if not m.shape else f"{m.shape[0]} ({list(m.shape)})"
                problems.append(f"{key}: expected {length} timesteps (as observations), got {got}")
            elif m.dtype.kind not in "biuf":
                problems.append(
                    f"{key}: expected bool, integer or floating-point data, got {m.dtype}"
                )
            elif m.fortran and len(m.shape) > 1:
                problems.append(
                    f"{key}: expected a C-ordered array, got a Fortran-ordered one (save it "
                    "again with np.ascontiguousarray)"
                )
            else:
                chosen.append(m)
        if problems:
            raise VaultStructureError(f"{self.path}: arrays that cannot be imported", problems)
        for key in skipped:
            self.streams.pop(key).close()
        order = {k: i for i, k in enumerate((*REQUIRED, *INFO))}
        chosen.sort(key=lambda m: (order.get(m.key, len(order)), m.key))
        return chosen, sorted(skipped)


def _header(stream: IO[bytes], path: Path, key: str) -> Member:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(stream)
        else:
            raise ValueError(f"npy format version {version[0]}.{version[1]} is not supported")
    except (ValueError, zipfile.BadZipFile, zlib.error, EOFError) as err:
        raise VaultCorruptError(
            f"{path}: member {key}.npy: expected a .npy array header, got an unreadable one ({err})"
        ) from None
    return Member(key, tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran))


# ------------------------------------------------------------------ OGBench's loader, from a vault
def ogbench_dataset(
    source: LocationLike | Vault,
    *,
    compact_dataset: bool = False,
    add_info: bool = False,
    ob_dtype: Any = np.float32,
    action_dtype: Any = np.float32,
) -> dict[str, np.ndarray]:
    """What ``ogbench.load_dataset`` returns for an imported file, computed from the vault.

    Bit-identical to OGBench's loader on the file the import came from, the derived fields
    of the module docstring included.

    An OGBench dataset is one flat sequence of trajectories, so the vault must have one row
    (as :func:`import_ogbench` makes). A vault of several rows is refused rather than read in
    part: take the row you want first with :func:`vault.derive_slice` (``rows=[i]``) and pass
    the new vault. The row's last state is its trajectory's last state (it has no next state)
    even where ``terminals`` is 0 there, so ``next_observations`` always matches
    ``observations`` in length; OGBench's files end with a terminal, where this changes
    nothing.

    Args:
        source: a one-row vault made by :func:`import_ogbench` (or its location).
        compact_dataset: OGBench's compact layout (``valids``, no ``next_observations``).
        add_info: keep ``qpos``, ``qvel`` and ``button_states`` (where the file has them).
        ob_dtype: the observations' dtype (OGBench: uint8 for visual datasets); bool,
            integer or floating-point.
        action_dtype: the actions' dtype (OGBench: int32 for powderworld); bool, integer or
            floating-point.

    Returns:
        A dict of numpy arrays, the whole dataset in memory (as OGBench's loader does).

    Raises:
        VaultArgumentError: ``compact_dataset`` or ``add_info`` not True/False, or
            ``ob_dtype`` or ``action_dtype`` not a bool, integer or floating-point dtype.
        VaultStructureError: the vault lacks ``observations``, ``actions`` or ``terminals``,
            or has more than one row.
    """
    bool_arg("compact_dataset", compact_dataset)
    bool_arg("add_info", add_info)
    ob_type = _dtype_arg("ob_dtype", ob_dtype)
    action_type = _dtype_arg("action_dtype", action_dtype)
    with opened(source) as vault:
        missing = [f"{k}: no such leaf" for k in REQUIRED if k not in vault.leaf_names]
        if missing:
            raise VaultStructureError(
                f"{vault.location}: expected the leaves of an OGBench import", missing
            )
        if vault.rows != 1:
            raise VaultStructureError(
                f"{vault.location}: expected one row (an OGBench dataset is one sequence of "
                f"trajectories), got {vault.rows} rows; take one row first "
                "(from vault import derive_slice; derive_slice(source, dest, rows=[i])), then "
                "call ogbench_dataset(dest)"
            )
        wanted = [*REQUIRED, *(k for k in INFO if add_info and k in vault.leaf_names)]
        data = {k: v[0] for k, v in vault.read_numpy(leaves=wanted).items()}
    out = {
        "observations": data["observations"].astype(ob_type, copy=False),
        "actions": data["actions"].astype(action_type, copy=False),
        "terminals": data["terminals"].astype(np.float32, copy=False),
    }
    info = {k: data[k] for k in INFO if k in data}
    ends = out["terminals"].copy()
    n = len(ends)
    if n:
        ends[-1] = 1.0  # the row's last state ends its trajectory: it has no next state
    # the flag one step later (the last state counts as followed by an end)
    later = np.concatenate([ends[1:], np.ones(min(n, 1), np.float32)])
    if compact_dataset:
        out["valids"] = 1.0 - ends
        out["terminals"] = np.minimum(ends + later, 1.0).astype(np.float32)
        return {**out, **info}
    keep = ends != 1.0  # every state but a trajectory's last has a next state
    follows = np.concatenate([[False], keep[:-1]])[:n]
    return {
        "observations": out["observations"][keep],
        "actions": out["actions"][keep],
        "terminals": later[keep].astype(np.float32),
        "next_observations": out["observations"][follows],
        **{k: v[keep] for k, v in info.items()},
    }
