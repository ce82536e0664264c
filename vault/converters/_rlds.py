"""RLDS datasets (TFDS directories of episodes of steps) -> vault, without TensorFlow (needs
``tensorflow-datasets`` and ``simplejpeg``: ``pip install "rlvault[rlds]"``).

**The source.** An RLDS dataset is a TFDS dataset directory (``<data_dir>/<name>/<version>``:
``dataset_info.json``, ``features.json`` and the split's files ``<name>-<split>.tfrecord-*``
or ``.array_record-*``) whose examples are episodes: a ``steps`` feature (a
``tfds.features.Dataset``) of steps with ``is_first``, ``is_last``, usually ``is_terminal``,
``observation``, ``action``, ``reward``, ``discount`` and whatever else the dataset records.
Its records are read here (TFRecord framing, every length and record checked against its
CRC-32C, or ``array_record``), parsed by TFDS (``features.deserialize_example_np``, the numpy
path of ``tfds.data_source``) and decoded leaf by leaf over all the steps of an episode: a
plain tensor is its parsed values, an encoded one goes through its TFDS feature's decoder,
an image through a JPEG or PNG decoder (below). TensorFlow is never imported. A path TFDS
can open (``etils.epath``: local, or ``gs://``/``s3://`` with ``gcsfs``/``s3fs``, or through
TensorFlow's file systems where it is installed) works for TFRecord files; ``array_record``
files must be local.

**The vault.** Every episode of the split, in file order and record order (the order of
``builder.as_data_source(split)``; ``as_dataset`` interleaves files unless told not to), is
appended to one row. Each step feature is a leaf of the same path (``observation/image``,
``action``): numeric and bool tensors with their dtype and shape, images decoded to ``uint8``
``[H, W, C]``. Features without a fixed shape or numeric values (``Text`` such as
``language_instruction``, ragged tensors, episode-level ``episode_metadata``) are not imported;
their paths are recorded under ``imported_from.skipped``. The episode index follows the RLDS
flags: with ``is_terminal``, it is the done leaf and ``is_last`` the truncated leaf (an episode
that ends on ``is_last`` alone is truncated); without it, ``is_last`` is the done leaf; a
scalar ``reward`` is the reward leaf. So the vault's episodes are the dataset's records exactly:
an episode whose ``is_last`` is not set on exactly its last step, or whose ``is_terminal`` is set
before its end, is refused (named by file and record); episodes without steps are skipped (and
logged).

**Images.** ``jpeg="tensorflow"`` (default) decodes JPEG-encoded images exactly as TensorFlow
does when TFDS's ``as_dataset`` reads them (libjpeg-turbo with its fast integer IDCT, through
``simplejpeg``), so a model trained on the vault sees the pixels a TFDS pipeline gave it.
``jpeg="tfds-numpy"`` decodes them as TFDS's numpy path does (OpenCV, else Pillow: the
accurate IDCT; up to about a dozen levels apart from TensorFlow's on noisy images). PNG is
lossless: every decoder gives the same pixels.

**Memory.** Episodes are decoded one at a time and appended in blocks of whole episodes of
about ``block_bytes`` (one block decoded while the previous one is appended): memory stays at
about two blocks, or two episodes where an episode is larger than a block, plus one record.
No shuffle or prefetch buffer exists to grow.

**Shards.** With ``shards=True``, ``dest`` is a :class:`~vault.Dataset` with one shard per
file of the split (named ``<split>-<index>``), each built under a hidden name and appearing
whole: an interrupted import resumes by running it again (shards already there are kept, once
their recorded origin is the same: source, dataset, version, split, file format and JPEG
decoder), and several processes or machines can import disjoint ``files`` of one split at
once.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vault._args import index_arg, path_arg
from vault._errors import (
    VaultArgumentError,
    VaultCorruptError,
    VaultExistsError,
    VaultNotFoundError,
    VaultStructureError,
)
from vault.converters._sink import BLOCK_BYTES, Progress, check_common, new_vault, pump_stream
from vault.converters._sink import require as require_module
from vault.dataset._dataset import Dataset
from vault.dataset._shards import SHARDS
from vault.derive._checks import refuse_shard_place
from vault.facade._vault import Vault
from vault.format._records import MANIFEST_KEY
from vault.storage._kinds import LocationLike, parse_location

_log = logging.getLogger(__name__)

JPEG_MODES = ("tensorflow", "tfds-numpy")
JPEG_MAGIC = b"\xff\xd8\xff"
_KMASK = 0xA282EAD8


def require(module: str) -> Any:
    return require_module(module, "rlds", "rlds")


@dataclasses.dataclass(frozen=True)
class StepLeaf:
    """One imported step feature: its path, shape and dtype, its TFDS feature, and how its
    parsed values become the leaf: ``"plain"`` (stored as the values themselves: taken as
    they are), ``"image"`` (encoded images, decoded here) or ``"decoded"`` (the feature's own
    decoder, step by step)."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    feature: Any
    kind: str

    @property
    def step_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Plan:
    """What an RLDS dataset's steps become: the leaves, the skipped features, the roles."""

    leaves: tuple[StepLeaf, ...]
    skipped: tuple[str, ...]
    episodes: dict[str, str | None]
    empty: tuple[str, ...] = ()  # step features with an empty axis (left out of the parse)

    @property
    def step_bytes(self) -> int:
        return sum(leaf.step_bytes for leaf in self.leaves)

    def example(self) -> dict[str, Any]:
        tree: dict[str, Any] = {}
        for leaf in self.leaves:
            put(tree, leaf.path, np.zeros(leaf.shape, leaf.dtype))
        return tree


def import_rlds(
    source: str | os.PathLike[str],
    dest: LocationLike,
    *,
    split: str = "train",
    shards: bool = False,
    files: Sequence[int] | None = None,
    jpeg: str = "tensorflow",
    codec: str | None = "auto",
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Vault | Dataset:
    """Import an RLDS (TFDS) dataset as a new vault or dataset of shards, episode by episode.

    The vault (or dataset of shards) at ``dest`` holds the episodes of ``split`` of the RLDS
    dataset directory ``source``; see the module docstring for the layout.

    Args:
        source: the TFDS dataset directory (the one holding ``dataset_info.json``), a local
            path or a URL TFDS can open.
        dest: where the new vault (or dataset) goes.
        split: the split to import (a name in ``dataset_info.json``; no slicing).
        shards: make ``dest`` a dataset with one shard per file of the split.
        files: with ``shards``, the indices of the split's files to import (default: all).
        jpeg: ``"tensorflow"`` (TensorFlow's pixels) or ``"tfds-numpy"`` (TFDS's numpy
            decoders' pixels).
        codec: the vault's compression (``"auto"``, a codec name, or None).
        block_bytes: about how many bytes of decoded steps are appended at a time.
        progress: called with (bytes of records read, bytes of the split's records).

    Returns:
        The vault opened read-only, or with ``shards`` the dataset.

    Raises:
        VaultNotFoundError: no TFDS dataset at ``source``, or no such split.
        VaultStructureError: not an RLDS dataset, or an episode whose flags do not match its
            steps (named by file and record).
        VaultCorruptError: a record fails its checksum, or a file is truncated.
        VaultDependencyError: ``tensorflow-datasets`` (or ``simplejpeg``) is not installed.
        VaultExistsError: with ``shards``, ``dest`` holds shards of another import (another
            source, dataset, version, split, file format or JPEG decoder).

    Nothing is left at ``dest`` (or, with ``shards``, at an unfinished shard) if the import
    fails or is interrupted.
    """
    block_bytes = check_common(block_bytes, progress)
    if not isinstance(jpeg, str) or jpeg not in JPEG_MODES:
        raise VaultArgumentError(f"jpeg must be one of {list(JPEG_MODES)}, got {jpeg!r}")
    if files is not None and not shards:
        raise VaultArgumentError("files= selects the files of a split for shards=True")
    tfds = require("tensorflow_datasets")
    if jpeg == "tensorflow":
        require("simplejpeg")
    builder = _builder(tfds, source)
    info = builder.info
    if split not in info.splits:
        raise VaultNotFoundError(
            f"{source}: expected a split named {split!r}, got only {sorted(info.splits)}"
        )
    plan = plan_steps(info.features, str(source))
    paths = [os.fspath(p) for p in info.splits[split].filepaths]
    fmt = str(getattr(info.file_format, "value", info.file_format) or "tfrecord")
    reader = record_reader(fmt, str(source))
    decode = episode_decoder(tfds, info.features, plan, jpeg)
    sizes = _record_bytes(info.splits[split], len(paths))
    origin = {
        "format": "rlds",
        "source": _source_name(source),
        "dataset": info.name,
        "version": str(info.version),
        "split": split,
        "file_format": fmt,
        "jpeg": jpeg,
        "skipped": list(plan.skipped),
    }

    def one(chosen: list[int], where: Any, done: int, total: int) -> int:
        return _import_one(paths, chosen, where, plan, reader, decode, origin, codec,
                           block_bytes, total, progress, done)  # fmt: skip

    def one_file(i: int, where: Any, done: int, total: int) -> int:
        """One file of shards mode, whose bytes are an estimate (its share of the split's,
        by episodes): the count stays within it, and ends the file at it."""
        end = done + sizes[i]

        def within(n: int, of: int) -> None:
            if progress is not None:
                progress(min(n, end), of)

        _import_one(paths, [i], where, plan, reader, decode, origin, codec, block_bytes,
                    total, within, done, shard=True)  # fmt: skip
        within(end, total)
        return end

    if not shards:
        one(list(range(len(paths))), dest, 0, sum(sizes))
        return Vault.open(dest)
    chosen = list(range(len(paths))) if files is None else _file_indices(files, len(paths))
    refuse_shard_place(parse_location(dest, argument="dest"))  # no dataset inside a dataset
    dataset = Dataset.create(
        dest, plan.example(), rows=1, codec=codec, metadata={"imported_from": origin},
        done_leaf=plan.episodes["done"], truncated_leaf=plan.episodes["truncated"],
        reward_leaf=plan.episodes["reward"], exist_ok=True,
    )  # fmt: skip
    dataset.close()
    root = parse_location(dest)
    _same_origin(Dataset.open(dest), origin)
    todo = [  # a shard appears whole: one that is there was imported before
        (i, root.child(f"{SHARDS}/{split}-{i:05d}"))
        for i in chosen
        if root.child(f"{SHARDS}/{split}-{i:05d}").read(MANIFEST_KEY) is None
    ]
    total, done = sum(sizes[i] for i, _ in todo), 0
    for i, where in todo:
        done = one_file(i, where, done, total)
    return Dataset.open(dest)


def _source_name(source: str | os.PathLike[str]) -> str:
    """``source`` as recorded: a local path made absolute (so that a resumed import names
    the same dataset however it is spelled), a URL as given."""
    text = os.fspath(source)
    return text if "://" in text else os.path.abspath(os.path.expanduser(text))


def _same_origin(dataset: Dataset, origin: dict[str, Any]) -> None:
    """Every shard already in the dataset was imported from ``origin`` (plus the files it
    holds), else a ``VaultExistsError``: a resumed import keeps what is there, so it must be
    the same import."""
    keys = ("format", "source", "dataset", "version", "split", "file_format", "jpeg")
    want = {k: origin[k] for k in keys}
    for name, vault in dataset.vaults():
        got = vault.metadata.get("imported_from")
        have = {k: got.get(k) for k in keys} if isinstance(got, dict) else got
        if have != want:
            raise VaultExistsError(
                f"{dataset.location}: shard {name} was imported from {have}, not {want}; a "
                "resumed import keeps the shards there, so it must repeat the same import "
                "(choose a new dest for another source or decoder)"
            )


def _import_one(
    paths: list[str],
    chosen: list[int],
    dest: Any,
    plan: Plan,
    reader: Callable[[str], Iterator[bytes]],
    decode: Callable[[bytes, str, int], dict[str, np.ndarray] | None],
    origin: dict[str, Any],
    codec: str | None,
    block_bytes: int,
    total: int,
    progress: Progress | None,
    done: int,
    shard: bool = False,
) -> int:
    """Import the files ``chosen`` into a new vault at ``dest`` (with ``shard``: a shard of
    the dataset this import made); returns ``done`` plus the record bytes read (the progress
    count)."""
    counts = {"episodes": 0, "empty": 0}
    names = [os.path.basename(paths[i]) for i in chosen]
    # what only the end of the import knows cannot go in the manifest (it is planned first):
    # the episodes are the vault's episode index, the empty ones are logged
    metadata = {"imported_from": {**origin, "files": names}}
    with new_vault(
        dest,
        plan.example(),
        rows=1,
        codec=codec,
        metadata=metadata,
        episodes=plan.episodes,
        shard=shard,
    ) as out:
        blocks = _blocks(paths, chosen, plan, reader, decode, block_bytes, counts)
        done = pump_stream(out, blocks, total, progress, done)
    if counts["empty"]:
        _log.warning("%s: skipped %d episodes without steps", ", ".join(names), counts["empty"])
    return done


def _blocks(
    paths: list[str],
    chosen: list[int],
    plan: Plan,
    reader: Callable[[str], Iterator[bytes]],
    decode: Callable[[bytes, str, int], dict[str, np.ndarray] | None],
    block_bytes: int,
    counts: dict[str, int],
) -> Iterator[tuple[Any, int]]:
    """Blocks of whole decoded episodes (``[1, n, ...]`` trees) with the record bytes each
    took, about ``block_bytes`` of steps at a time."""
    parts: list[dict[str, np.ndarray]] = []
    size = read = 0
    for i in chosen:
        name = os.path.basename(paths[i])
        for k, record in enumerate(reader(paths[i])):
            read += len(record)
            steps = decode(record, name, k)
            del record
            if steps is None:
                counts["empty"] += 1
                continue
            counts["episodes"] += 1
            parts.append(steps)
            size += len(steps[plan.leaves[0].path]) * plan.step_bytes
            if size >= block_bytes:
                yield _joined(parts, plan), read
                parts, size, read = [], 0, 0
    if parts:
        yield _joined(parts, plan), read
    elif read:  # episodes without steps after the last block: their bytes were read too
        yield None, read


def _joined(parts: list[dict[str, np.ndarray]], plan: Plan) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for leaf in plan.leaves:
        column = [p[leaf.path] for p in parts]
        joined = column[0] if len(column) == 1 else np.concatenate(column)
        put(tree, leaf.path, joined[None])
    return tree


# ------------------------------------------------------------------------------ the plan
def _builder(tfds: Any, source: str | os.PathLike[str]) -> Any:
    text = path_arg("source", source, "a TFDS dataset folder")
    if "://" not in text:
        text = os.path.expanduser(text)  # as every other importer's source
    from etils import epath

    if not (epath.Path(text) / "dataset_info.json").exists():
        raise VaultNotFoundError(
            f"{text}: expected a TFDS dataset directory (<data_dir>/<name>/<version> holding "
            "dataset_info.json), got none there"
        )
    try:
        return tfds.builder_from_directory(text)
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise VaultCorruptError(
            f"{text}: a TFDS dataset directory TFDS cannot open ({err})"
        ) from None


def plan_steps(features: Any, where: str) -> Plan:
    """The leaves of an RLDS dataset's steps (sorted by path), what is skipped and the
    episode roles; :class:`VaultStructureError` when it is not RLDS."""
    import tensorflow_datasets as tfds

    steps = features["steps"] if "steps" in features.keys() else None  # noqa: SIM118
    if not isinstance(steps, tfds.features.Dataset):
        raise VaultStructureError(
            f"{where}: not an RLDS dataset",
            [f"steps: expected a tfds.features.Dataset of steps, got {type(steps).__name__}"],
        )
    leaves: list[StepLeaf] = []
    skipped: list[str] = []
    empty: list[str] = []

    def walk(feature: Any, prefix: str) -> None:
        for key in sorted(feature.keys()):
            sub, path = feature[key], f"{prefix}{key}"
            if isinstance(sub, tfds.features.FeaturesDict):
                walk(sub, f"{path}/")
                continue
            found = getattr(sub, "shape", None)
            dtype = np.dtype(getattr(sub, "np_dtype", object))
            fixed = isinstance(found, tuple) and all(isinstance(n, int) for n in found)
            shape: tuple[int, ...] = tuple(found) if fixed and found is not None else ()
            if isinstance(sub, tfds.features.Image) and fixed and _image_dtype(dtype, shape):
                leaves.append(StepLeaf(path, shape, dtype, sub, "image"))
            elif fixed and 0 in shape:  # nothing to store: listed as skipped
                skipped.append(f"steps/{path} (empty shape {list(shape)})")
                empty.append(path)
            elif (
                type(sub) in (tfds.features.Tensor, tfds.features.Scalar, tfds.features.ClassLabel)
                and fixed
                and dtype.kind in "biuf"
            ):
                stored = sub.get_serialized_info()
                plain = tuple(stored.shape) == shape and np.dtype(stored.np_dtype) == dtype
                leaves.append(StepLeaf(path, shape, dtype, sub, "plain" if plain else "decoded"))
            else:
                skipped.append(f"steps/{path}")

    walk(steps.feature, "")
    skipped += [f"{key} (per episode)" for key in sorted(features.keys()) if key != "steps"]
    names = {leaf.path: leaf for leaf in leaves}
    problems = [
        f"steps/{flag}: expected a bool scalar per step, got "
        + ("nothing" if flag not in names else f"{names[flag].dtype} {list(names[flag].shape)}")
        for flag in ("is_first", "is_last")
        if flag not in names or names[flag].shape != () or names[flag].dtype != np.bool_
    ]
    if problems or not leaves:
        raise VaultStructureError(f"{where}: not an RLDS dataset", problems)
    terminal = names.get("is_terminal")
    has_terminal = terminal is not None and terminal.shape == () and terminal.dtype == np.bool_
    reward = names.get("reward")
    episodes = {
        "done": "is_terminal" if has_terminal else "is_last",
        "truncated": "is_last" if has_terminal else None,
        "reward": "reward" if reward is not None and reward.shape == () else None,
    }
    return Plan(tuple(leaves), tuple(skipped), episodes, tuple(empty))


# ---------------------------------------------------------------------------- decoding
def episode_decoder(
    tfds: Any, features: Any, plan: Plan, jpeg: str
) -> Callable[[bytes, str, int], dict[str, np.ndarray] | None]:
    """``decode(record, file name, record index)``: one episode's steps as ``{path: [T,
    ...]}`` (None for an episode without steps), its flags checked."""
    # the steps as parsed (each feature stacked over the steps), decoded here leaf by leaf:
    # a plain tensor is its parsed values, so only images and encoded tensors cost a step each
    decoders = {"steps": tfds.decode.SkipDecoding()}
    features = _parsed_features(tfds, features, plan)
    done_flag, last_flag = plan.episodes["done"], "is_last"

    def decode(record: bytes, name: str, index: int) -> dict[str, np.ndarray] | None:
        try:
            steps = features.deserialize_example_np(record, decoders=decoders)["steps"]
            columns = {leaf.path: get(steps, leaf.path) for leaf in plan.leaves}
        except Exception as err:  # TFDS's parser: protobuf and shape errors of every kind
            raise VaultCorruptError(
                f"{name}: record {index} is not an example of this dataset's features ({err})"
            ) from None
        n = len(columns[last_flag])
        if n == 0:
            return None
        out = {}
        for leaf in plan.leaves:
            raw = columns[leaf.path]
            if leaf.kind == "plain":
                value = np.asarray(raw, leaf.dtype).reshape(n, *leaf.shape)
            elif leaf.kind == "image":
                value = np.stack([_image(v, leaf, jpeg, name, index) for v in raw])
            else:
                decoded = leaf.feature.decode_batch_example_np(raw)
                value = np.stack([np.asarray(v, leaf.dtype) for v in decoded])
            if value.shape != (n, *leaf.shape):
                want = [n, *leaf.shape]
                raise VaultStructureError(
                    f"{name}: record {index}: a feature of another shape",
                    [f"steps/{leaf.path}: expected {want} ({n} steps), got {list(value.shape)}"],
                )
            out[leaf.path] = value
        _check_flags(out, done_flag, last_flag, name, index)
        return out

    return decode


def _parsed_features(tfds: Any, features: Any, plan: Plan) -> Any:
    """The step features the import reads: without those of an empty axis, which TFDS's
    numpy parser cannot parse (it fails on the whole record), and which hold nothing."""
    empty = set(plan.empty)
    if not empty:
        return features

    def pruned(node: Any, prefix: str) -> Any:
        kept = {}
        for key in sorted(node.keys()):
            sub, path = node[key], f"{prefix}{key}"
            if path in empty:
                continue
            is_dict = isinstance(sub, tfds.features.FeaturesDict)
            kept[key] = pruned(sub, f"{path}/") if is_dict else sub
        return tfds.features.FeaturesDict(kept)

    steps = tfds.features.Dataset(pruned(features["steps"].feature, ""))
    kept = {key: features[key] for key in sorted(features.keys()) if key != "steps"}
    return tfds.features.FeaturesDict({**kept, "steps": steps})


def _image_dtype(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Images imported: ``uint8`` ones, and ``uint16`` ones of one channel (depth, as PNG)."""
    return dtype == np.uint8 or (dtype == np.uint16 and shape[-1:] == (1,))


def _image(data: Any, leaf: StepLeaf, jpeg: str, name: str, index: int) -> np.ndarray:
    raw = bytes(data)
    if leaf.dtype == np.uint16:  # TFDS's numpy decoders need OpenCV for these; Pillow reads them
        image = _png16(raw, leaf, name, index)
    elif jpeg == "tensorflow" and raw[:3] == JPEG_MAGIC:
        import simplejpeg

        channels = leaf.shape[-1]
        try:
            image = simplejpeg.decode_jpeg(
                raw, colorspace="GRAY" if channels == 1 else "RGB", fastdct=True,
                fastupsample=False,
            )  # fmt: skip
        except ValueError as err:
            raise VaultCorruptError(
                f"{name}: record {index}: {leaf.path}: a JPEG image that cannot be decoded ({err})"
            ) from None
    else:
        image = np.asarray(leaf.feature.decode_example_np(raw))
    image = image.reshape((*image.shape[:2], -1))
    if image.shape != leaf.shape:
        raise VaultStructureError(
            f"{name}: record {index}: an image of another shape",
            [f"steps/{leaf.path}: expected {list(leaf.shape)}, got {list(image.shape)}"],
        )
    return image


def _png16(raw: bytes, leaf: StepLeaf, name: str, index: int) -> np.ndarray:
    """A 16-bit single-channel PNG (a depth image) as ``uint16`` ``[H, W]``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            if image.mode not in ("I;16", "I;16B", "I;16L"):
                raise ValueError(f"mode {image.mode}, not a 16-bit gray image")
            return np.asarray(image).astype(np.uint16)
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise VaultCorruptError(
            f"{name}: record {index}: {leaf.path}: a 16-bit PNG image that cannot be decoded "
            f"({err})"
        ) from None


def _check_flags(
    steps: dict[str, np.ndarray], done: str | None, last: str, name: str, index: int
) -> None:
    n = len(steps[last])
    ends = np.flatnonzero(steps[last])
    problems = []
    if ends.tolist() != [n - 1]:
        problems.append(
            f"steps/{last}: expected True at its last step ({n - 1}) only, got True at "
            f"{ends.tolist()}"
        )
    if done is not None and done != last:
        early = np.flatnonzero(steps[done][:-1])
        if early.size:
            problems.append(
                f"steps/{done}: expected True at most at its last step ({n - 1}), got True "
                f"at {early.tolist()}"
            )
    if problems:
        raise VaultStructureError(
            f"{name}: record {index}: an episode whose RLDS flags do not end it at its last "
            "step (the vault's episodes are the dataset's)",
            problems,
        )


# ---------------------------------------------------------------------------- records
def record_reader(fmt: str, where: str) -> Callable[[str], Iterator[bytes]]:
    """The records of one file of ``fmt`` (``tfrecord`` or ``array_record``), in order."""
    if fmt == "tfrecord":
        return tfrecords
    if fmt == "array_record":
        require("array_record")
        return array_records
    raise VaultStructureError(
        f"{where}: files of format {fmt!r}",
        [f"file_format: expected tfrecord or array_record, got {fmt}"],
    )


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _KMASK) & 0xFFFFFFFF


def tfrecords(path: str, buffer: int = 1 << 20) -> Iterator[bytes]:
    """The records of a TFRecord file (``uint64`` length, masked CRC-32C of the length, the
    record, masked CRC-32C of the record), each checked."""
    import google_crc32c
    from etils import epath

    name = os.path.basename(path)
    with epath.Path(path).open("rb") as raw:
        f = io.BufferedReader(raw, buffer) if not isinstance(raw, io.BufferedReader) else raw
        index = offset = 0
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise _truncated(name, index, offset)
            (length,) = struct.unpack("<Q", head[:8])
            (crc,) = struct.unpack("<I", head[8:])
            if _masked(google_crc32c.value(head[:8])) != crc:
                raise VaultCorruptError(
                    f"{name}: record {index} (byte {offset}): its length fails its CRC-32C; "
                    "the file is damaged (fetch it again)"
                )
            data = f.read(length)
            tail = f.read(4)
            if len(data) < length or len(tail) < 4:
                raise _truncated(name, index, offset)
            if _masked(google_crc32c.value(data)) != struct.unpack("<I", tail)[0]:
                raise VaultCorruptError(
                    f"{name}: record {index} (byte {offset}): its data fails its CRC-32C; "
                    "the file is damaged (fetch it again)"
                )
            yield data
            index += 1
            offset += 16 + length


def _truncated(name: str, index: int, offset: int) -> VaultCorruptError:
    return VaultCorruptError(
        f"{name}: record {index} (byte {offset}): expected a whole record, got the end of the "
        "file; the file is truncated (fetch it again)"
    )


def array_records(path: str, batch: int = 16) -> Iterator[bytes]:
    """The records of an ``array_record`` file, read ``batch`` at a time."""
    from array_record.python.array_record_module import ArrayRecordReader

    try:
        reader = ArrayRecordReader(path)
    except (RuntimeError, OSError, ValueError) as err:
        raise VaultCorruptError(
            f"{os.path.basename(path)}: not an array_record file array_record can open ({err})"
        ) from None
    try:
        count = reader.num_records()
        for start in range(0, count, batch):
            yield from reader.read(start, min(count, start + batch))
    finally:
        reader.close()


# ---------------------------------------------------------------------------- helpers
def _file_indices(files: Sequence[int], count: int) -> list[int]:
    """The indices ``files`` (ints, numpy integers too: ``np.array_split`` of the files
    among workers), checked and sorted."""
    try:
        out = [index_arg("files", f) for f in files]
    except VaultArgumentError:
        out = []  # refused below, with every index given
    if not out or not all(0 <= i < count for i in out):
        raise VaultArgumentError(
            f"files: expected indices of the split's {count} files (0 to {count - 1}), got "
            f"{list(files)!r}"
        )
    return sorted(set(out))


def _record_bytes(split: Any, files: int) -> list[int]:
    """The bytes of records in each file of ``split`` (TFDS records the split's total and
    each file's episode count: shared out by episodes), for the progress."""
    lengths = [int(n) for n in getattr(split, "shard_lengths", [])] or [1] * files
    total, episodes = int(split.num_bytes), sum(lengths) or 1
    ahead = np.cumsum([0, *lengths]) * total // episodes  # the shares add up to the total
    return np.diff(ahead).astype(int).tolist()


def put(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split("/")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def get(tree: Any, path: str) -> Any:
    for key in path.split("/"):
        tree = tree[key]
    return tree
