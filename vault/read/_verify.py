"""Check a vault end to end and list every problem with its place.

:func:`verify` reads the vault at the byte level rather than through :meth:`Vault.open`,
which stops at the first problem: the manifest's schema, the commit record against every
array's metadata, every chunk inside the committed range (decoding a chunk checks its
``crc32c`` digest; each chunk is read on its own so that every bad chunk is named), chunk files
that are missing, and, when the vault keeps an episode index, the index against the
done/truncated/reward leaves (recomputed from the data a block of time-chunks at a time).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorstore as ts

from vault._args import callable_arg
from vault._errors import VaultCorruptError, VaultNotFoundError
from vault.commits._pins import (
    check_fingerprint,
    commit_id,
    fingerprint_problem,
    snapshot_for_check,
)
from vault.commits._snapshot import no_vault, storage_failure
from vault.format import _tags
from vault.format._episodes import index_expect
from vault.format._limits import MAX_RECORD_BYTES, indices, max_encoded_bytes
from vault.format._parts import episode_record_problems, seam_problems
from vault.format._records import (
    BOUNDS,
    COMMIT_ATTR,
    COMMIT_KEY,
    DIGESTS_SINCE,
    EPISODES,
    EXPERIENCE,
    FORMAT_VERSION,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    PENDING_TAGS,
    RETURNS,
    SEAMS_KEY,
    TRASH_DIR,
    ZARR_JSON,
    Manifest,
    chunk_key,
    commit_problems,
    digest_problems,
    is_int,
    is_int_list,
    leaf_key,
    manifest_problems,
    parse_json,
)
from vault.read._report import Problem, VerifyReport
from vault.read._verify_episodes import EpisodeScan
from vault.storage._arrays import expected_metadata
from vault.storage._kinds import parse_location
from vault.storage._location import Location

if TYPE_CHECKING:
    from vault.commits._pins import Pin

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)``; units: chunks, then blocks of the episode scan."""

READ_BATCH_BYTES = 64 << 20
READ_BATCH_CHUNKS = 64
MAX_NAMED = 20  # missing chunks named one by one per array; the rest are counted
_MANIFEST = f"{MANIFEST_KEY} (manifest)"
_COMMIT = f"{COMMIT_KEY} (commit record)"


@dataclasses.dataclass
class _Array:
    """One Zarr array to check: its key, expected metadata, and the extent to read."""

    key: str
    shape: list[int | None]  # expected shape (None: the growing axis)
    dtype: str
    chunk: list[int] | None  # expected chunk shape (None: not fixed by the manifest)
    extent: list[int] = dataclasses.field(default_factory=list)
    handle: Any = None
    encoding: tuple[str, str] = ("default", "/")
    expect: dict[str, Any] | None = None  # metadata the array must match


class _Checker:
    def __init__(self, location: Location, progress: Progress | None) -> None:
        self.location, self.progress = location, progress
        self.kv = location.kvstore()
        self.report = VerifyReport(str(location))
        self.done = 0
        self.total = 0
        self.blosc: dict[str, bool] = {}  # array key: its chunks are blosc frames
        self.gone: dict[str, int] = {}  # array key: chunks missing inside its extent

    def problem(self, place: str, message: str) -> None:
        self.report.problems.append(Problem(place, message))

    def warn(self, place: str, message: str) -> None:
        self.report.warnings.append(Problem(place, message))

    def tick(self, advance: int = 0) -> None:
        self.done += advance
        if self.progress is not None:
            self.progress(self.done, self.total)

    def read_json(self, key: str) -> tuple[str, Any]:
        """(``"missing"`` | ``"invalid"`` | ``"ok"``, document or error text). Read as the
        location reads records (on a file system: a regular file inside the vault, of at
        most ``MAX_RECORD_BYTES``), parsed within ``MAX_RECORD_DEPTH``."""
        try:
            raw = self.location.read(key)
            if raw is None:
                return "missing", None
            return "ok", parse_json(raw, key)
        except VaultCorruptError as err:
            return "invalid", _one_line(err)

    # ----------------------------------------------------------------------------- metadata
    def manifest(self) -> Manifest | None:
        state, doc = self.read_json(MANIFEST_KEY)
        if state == "missing":
            raise no_vault(self.location)
        if state == "invalid":
            self.problem(_MANIFEST, f"not valid JSON: {doc}")
            return None
        attrs = doc.get("attributes") if isinstance(doc, dict) else None
        if not isinstance(attrs, dict) or MANIFEST_ATTR not in attrs:
            raise VaultNotFoundError(
                f"{self.report.location} is not an rlvault vault (no 'rlvault' attributes in "
                f"{MANIFEST_KEY})"
            )
        raw = attrs[MANIFEST_ATTR]
        version = raw.get("format_version") if isinstance(raw, dict) else None
        if is_int(version, 1) and version > FORMAT_VERSION:  # not corrupt: newer than us
            Manifest.from_json(attrs[MANIFEST_ATTR], self.report.location)  # VaultVersionError
        found = manifest_problems(attrs[MANIFEST_ATTR])
        if not found:
            found = digest_problems(raw, raw["format_version"] >= DIGESTS_SINCE)
        for message in found:
            self.problem(_MANIFEST, message)
        return None if found else Manifest.from_json(attrs[MANIFEST_ATTR], self.report.location)

    def groups(self, names: list[str], episodes: bool) -> None:
        parents = {EXPERIENCE} | ({EPISODES} if episodes else set())
        for name in names:
            parts = name.split("/")[:-1]
            parents.update(f"{EXPERIENCE}/{'/'.join(parts[:i])}" for i in range(1, len(parts) + 1))
        for group in sorted(parents):
            key = f"{group}/{ZARR_JSON}"
            state, doc = self.read_json(key)
            if state != "ok" or not isinstance(doc, dict) or doc.get("node_type") != "group":
                what = {"missing": "missing", "invalid": "not valid JSON"}.get(state, "not a group")
                self.problem(key, f"group metadata {what} (zarr-python cannot open the hierarchy)")

    def commit(self, manifest: Manifest | None) -> dict[str, Any] | None:
        state, doc = self.read_json(COMMIT_KEY)
        if state != "ok":
            self.problem(_COMMIT, "missing" if state == "missing" else f"not valid JSON: {doc}")
            return None
        record = doc.get("attributes", {}).get(COMMIT_ATTR) if isinstance(doc, dict) else None
        if not isinstance(record, dict):
            self.problem(_COMMIT, f"no '{COMMIT_ATTR}' attributes")
            return None
        length = record.get("committed_length")
        if not is_int(length, 0):
            self.problem(_COMMIT, f"committed_length must be an int >= 0, got {length!r}")
            return None
        if not is_int(record.get("seq"), 0):
            self.problem(_COMMIT, f"seq must be an int >= 0, got {record.get('seq')!r}")
        bad_seams = seam_problems(record.get(SEAMS_KEY, []), length)
        for message in bad_seams:
            self.problem(_COMMIT, message)
        if bad_seams:
            record[SEAMS_KEY] = []
        if manifest is not None and manifest.episodes is not None:
            bad = episode_record_problems(record.get("episodes"), manifest.rows, length)
            for message in bad:
                self.problem(_COMMIT, message)
            if bad:
                record["episodes"] = None
        if manifest is not None:
            for message in digest_problems(record, manifest.format_version >= DIGESTS_SINCE):
                self.problem(_COMMIT, message)
            count = (record.get("episodes") or {}).get("count")
            bad_places = [
                m
                for m in commit_problems(record, manifest)
                if m.startswith(("edges", PENDING_TAGS))
                or (m.startswith("episodes.count") and count)
            ]
            for message in bad_places:
                self.problem(_COMMIT, message)
            if any(m.startswith("edges") for m in bad_places):  # checked without them
                record["edges"] = {}  # (the tags still hold)
            if any(m.startswith(PENDING_TAGS) for m in bad_places):
                record[PENDING_TAGS] = {}  # the arrays they were for are reported then
        self.report.committed_length = length
        return record

    def array(self, arr: _Array) -> bool:
        """Check ``arr``'s metadata against what the manifest says and open it."""
        key = f"{arr.key}/{ZARR_JSON}"
        state, meta = self.read_json(key)
        if state != "ok" or not isinstance(meta, dict):
            self.problem(key, "array metadata missing" if state == "missing" else f"{meta}")
            return False
        shape = meta.get("shape")
        grid = meta.get("chunk_grid", {})
        chunk = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
        found = []
        if (
            not isinstance(shape, list)
            or len(shape) != len(arr.shape)
            or any(w is not None and s != w for s, w in zip(shape, arr.shape, strict=False))
        ):
            want = ", ".join("N" if w is None else str(w) for w in arr.shape)
            found.append(f"shape {shape}, expected [{want}]")
        if meta.get("data_type") != arr.dtype:
            found.append(f"data_type {meta.get('data_type')!r}, expected {arr.dtype!r}")
        if not is_int_list(chunk, 1) or (arr.chunk is not None and chunk != arr.chunk):
            found.append(f"chunk shape {chunk}, expected {arr.chunk}")
        codecs = [c.get("name") for c in meta.get("codecs", []) if isinstance(c, dict)]
        if not codecs or codecs[-1] != "crc32c":
            found.append(f"codecs {codecs} do not end with a crc32c checksum")
        encoding = meta.get("chunk_key_encoding", {"name": "default"})
        encoding = encoding if isinstance(encoding, dict) else {}
        name = encoding.get("name", "default")
        sep = (encoding.get("configuration") or {}).get("separator")
        arr.encoding = (name, sep or ("/" if name == "default" else "."))
        if arr.encoding != ("default", "/"):  # format section 4.2: every array's
            found.append(
                f"chunk key encoding {name!r} with separator {arr.encoding[1]!r}, expected "
                "'default' with '/' (its chunks would be read from keys that hold none)"
            )
        for message in found:
            self.problem(key, message)
        if found or not is_int_list(chunk, 1):
            return False
        arr.chunk = list(chunk)
        try:  # what TensorStore reads to open it: a regular file inside the vault
            self.location.check_files([key], MAX_RECORD_BYTES)
        except VaultCorruptError as err:
            self.problem(key, _one_line(err))
            return False
        spec: dict[str, Any] = {"driver": "zarr3", "kvstore": self.location.child_spec(arr.key)}
        if arr.expect is not None:  # endianness, codec settings, fill value
            spec["metadata"] = arr.expect
        try:
            arr.handle = ts.open(spec, context=self.location.context(), read=True).result()
        except ValueError as err:
            self.problem(key, f"TensorStore cannot open the array: {_one_line(err)}")
            return False
        return True

    def bound_extent(self, arr: _Array, axis: int, wanted: int, what: str, by: str) -> None:
        """Read ``arr`` up to ``wanted`` along ``axis``; a shorter array is a problem."""
        held = int(arr.handle.shape[axis])
        if wanted > held:
            self.problem(
                arr.key,
                f"{by} says {wanted} {what} but the array holds only {held} ({by} ahead of "
                "the data)",
            )
        arr.extent = [int(d) for d in arr.handle.shape]
        arr.extent[axis] = min(wanted, held)

    # ----------------------------------------------------------------------------- chunks
    def chunks(self, arrays: list[_Array], stores_fill: bool) -> None:
        """Decode every stored chunk inside each array's extent (a batch at a time), and name
        the chunks missing there. Work follows the chunk files that are listed, never the
        number of chunks the metadata claims: a vault that claims more than it stores is
        reported (the first missing chunks by name, then how many) without enumerating it."""
        for arr in arrays:
            prefix = f"{arr.key}/"
            listed = self.kv.list(ts.KvStore.KeyRange(prefix, prefix[:-1] + "0")).result()
            counts = _counts(arr)
            present = sorted(
                index
                for raw in listed
                if (index := _chunk_index(raw.decode()[len(prefix) :], arr.encoding, counts))
                is not None
            )
            absent, gone = self.missing(arr, set(present), counts, stores_fill)
            self.gone[arr.key] = gone
            itemsize = np.dtype(arr.dtype).itemsize
            decoded = max(1, math.prod(arr.chunk or [1]) * itemsize)
            blosc = decoded if self.blosc.get(arr.key) else None
            batch: list[tuple[str, str, Any]] = []
            for index in present:
                key = chunk_key(index, *arr.encoding)
                place = f"{arr.key} chunk {'.'.join(map(str, index))}"
                try:
                    self.location.check_files(
                        [f"{arr.key}/{key}"], max_encoded_bytes(decoded), blosc
                    )
                except VaultCorruptError as err:
                    self.problem(place, f"{_span(arr, index)}{_one_line(err)}")
                    self.tick(1)
                    continue
                region = tuple(
                    slice(i * c, min((i + 1) * c, e))
                    for i, c, e in zip(index, arr.chunk or [], arr.extent, strict=True)
                )
                span = f"{_span(arr, index)}{arr.key}/{key} "  # the same on every store
                batch.append((place, span, arr.handle[region].read()))
                if len(batch) >= READ_BATCH_CHUNKS or len(batch) * decoded >= READ_BATCH_BYTES:
                    self.settle(batch)
            self.settle(batch)
            if gone and not stores_fill:
                self.absent_warning(arr, absent, gone)

    def missing(
        self, arr: _Array, present: set[tuple[int, ...]], counts: list[int], stores_fill: bool
    ) -> tuple[list[str], int]:
        """The keys of chunks inside ``arr``'s extent that are not stored (at most
        ``MAX_NAMED`` named one by one: the rest is counted), reported as problems where the
        writer stores every chunk."""
        total = math.prod(counts)
        gone = total - len(present)
        if not gone:
            return [], 0
        named: list[str] = []
        for index in indices(counts):
            if index in present:
                continue
            named.append(chunk_key(index, *arr.encoding))
            if stores_fill:
                self.problem(
                    f"{arr.key} chunk {'.'.join(map(str, index))}",
                    f"{_span(arr, index)}chunk file {arr.key}/{named[-1]} is missing (its values "
                    "would read as the fill value)",
                )
            if len(named) >= MAX_NAMED:
                break
        if stores_fill and gone > len(named):
            self.problem(
                arr.key,
                f"... and {gone - len(named)} more chunk files are missing ({gone} of the "
                f"{total} the commit record's extent needs)",
            )
        self.tick(gone)
        return named, gone

    def places(self, manifest: Manifest, record: dict[str, Any], arrays: list[_Array]) -> None:
        """Every complete chunk is the one written at its place, and the committed part of
        each partly filled last chunk matches the commit record (``vault/format/_tags.py``); arrays
        whose chunks are already reported damaged are not checked again."""
        reported = {p.place.split(" ")[0] for p in self.report.problems}
        found = [
            (a.key, a.handle, a.extent[1 if a.key.startswith(EXPERIENCE) else 0])
            for a in arrays
            if a.handle is not None and a.extent and a.key not in reported
        ]
        for key, message in _tags.verify_places(self.location, manifest, record, found):
            self.problem(key, _one_line(message))
        if _tags.enabled(manifest):
            for key, grid in _tags.grids(manifest).items():
                if grid.partial:
                    self.warn(
                        key,
                        f"format {manifest.format_version}: its chunks cut its item axes, and "
                        "only the first item chunk of each place is bound to it (checked); the "
                        "others are checked by their own crc32c only, so one copied over "
                        "another place would read as data. Vaults created now bind every chunk "
                        "(format 4): copy this one into a new vault (`vault slice VAULT -o NEW`) "
                        "for that",
                    )

    def trash(self) -> None:
        """Old versions of replaced files that a writer holds until it frees them."""
        prefix = f"{TRASH_DIR}/"
        keys = self.kv.list(ts.KvStore.KeyRange(prefix, prefix[:-1] + "0")).result()
        held = [k for k in keys if bytes(k).decode() != f"{prefix}{ZARR_JSON}"]
        if held:
            many = f"{len(held)} old versions of replaced files are"
            what = "1 old version of a replaced file is" if len(held) == 1 else many
            self.warn(
                TRASH_DIR,
                f"{what} waiting to be freed (a writer is running, or one died: the next writer "
                "frees them). They are not data",
            )

    def absent_warning(self, arr: _Array, absent: list[str], gone: int) -> None:
        """Chunk files absent from a vault whose writer may leave out fill-valued chunks."""
        listed = ", ".join(absent[:8]) + (f", ... ({gone} in all)" if gone > 8 else "")
        self.warn(
            arr.key,
            f"{gone} chunk files absent ({listed}); they read as the fill value "
            f"({arr.handle.fill_value}). This vault's writer leaves out chunks that hold only "
            "the fill value, so a deleted chunk cannot be told from such a chunk",
        )

    def settle(self, batch: list[tuple[str, str, Any]]) -> None:
        for place, span, future in batch:
            try:
                future.result()
            except ValueError as err:
                typed = storage_failure(self.location, err)
                if typed is not None:  # not the data: the storage would not give it
                    raise typed from err
                self.problem(place, f"{span}is corrupt: its bytes do not decode ({_why(err)})")
        self.report.chunks_checked += len(batch)
        self.tick(len(batch))
        batch.clear()


def _span(arr: _Array, index: tuple[int, ...]) -> str:
    """The timesteps that chunk ``index`` of a leaf's array holds, as a problem's message
    starts (``"timesteps 12-15: "``); empty for the other arrays."""
    if not arr.key.startswith(f"{EXPERIENCE}/") or not arr.chunk or len(index) < 2:
        return ""
    step = arr.chunk[1]
    last = min((index[1] + 1) * step, arr.extent[1]) - 1
    return f"timesteps {index[1] * step}-{last}: "


def _one_line(err: BaseException | str) -> str:
    """``err`` on one line, without the spec TensorStore appends to its errors."""
    return " ".join(str(err).split(" [tensorstore_spec=")[0].split())


def _why(err: BaseException) -> str:
    """What TensorStore found wrong with a chunk's bytes, without its status code and the key
    it read (which on an object store lacks the bucket): the same words on every store."""
    text = re.sub(r"^[A-Z_]+: ", "", _one_line(err))
    return re.sub(r'Error reading (local file )?"[^"]*":\s*', "", text) or text


def _chunk_index(name: str, encoding: tuple[str, str], counts: list[int]) -> tuple[int, ...] | None:
    """The chunk index that key ``name`` (relative to its array) stands for under
    ``encoding``, if it is one inside ``counts`` (None: metadata, a temporary file, a chunk
    past the extent)."""
    kind, sep = encoding
    if kind == "default":
        if not name.startswith(f"c{sep}"):
            return None
        name = name[2:]
    parts = name.split(sep)
    if len(parts) != len(counts) or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    index = tuple(int(p) for p in parts)
    return index if all(i < n for i, n in zip(index, counts, strict=True)) else None


def _counts(arr: _Array) -> list[int]:
    return [math.ceil(e / c) for e, c in zip(arr.extent, arr.chunk or [], strict=True)]


# --------------------------------------------------------------------------------- episodes
def verify(
    location_or_vault: Any,
    progress: Progress | None = None,
    *,
    at: Pin | None = None,
    fingerprint: str | None = None,
) -> VerifyReport:
    """Check a vault: manifest, commit record, every chunk's checksum, the episode index.

    Never modifies anything. Memory stays bounded: chunks are decoded a batch at a time and
    the episode scan reads a block of time-chunks at a time.

    Args:
        location_or_vault: the vault's path or URL, or an open :class:`Vault` (one opened
            at a commit, :attr:`Vault.pinned`, is checked at that commit unless ``at`` says
            otherwise).
        progress: called as ``progress(done, total)``: chunks, then blocks of the episode
            scan.
        at: check the data of that commit (its number, id or a tag).
        fingerprint: the content fingerprint the data must have (:meth:`Vault.fingerprint`);
            a difference is a problem, and the chunk checks name the arrays and time ranges
            that differ from what was written. Without ``at``, growth is no difference: the
            commit with that fingerprint is checked (a warning says so).

    Returns:
        A report listing every problem and warning with its place (``ok`` when none).

    Raises:
        VaultNotFoundError: no vault there at all.
        VaultPinError: the vault cannot serve ``at``.
        VaultArgumentError: ``fingerprint`` is not a fingerprint (``sha256:`` and 64 hex
            digits), or ``progress`` is not a function.
    """
    progress = callable_arg("progress", progress)
    if fingerprint is not None:
        check_fingerprint(fingerprint)
    if hasattr(location_or_vault, "snapshot"):  # an open Vault
        location = location_or_vault.snapshot.location
        if at is None and getattr(location_or_vault, "pinned", False):
            at = commit_id(location_or_vault.snapshot.commit)  # the commit it reads
    else:
        location = parse_location(location_or_vault)
    checker = _Checker(location, progress)
    manifest = checker.manifest()
    if manifest is not None:
        checker.blosc = {
            leaf_key(leaf.name): any(c.get("name") == "blosc" for c in leaf.codecs)
            for leaf in manifest.leaves
        }
    record = checker.commit(manifest)
    if manifest is None:
        return checker.report
    pinned = None
    if (at is not None or fingerprint is not None) and record is not None:
        pinned, trouble, grown = snapshot_for_check(location, manifest, at, fingerprint)
        if grown is not None:  # the vault has grown since the fingerprint
            checker.warn("fingerprint", grown)
        if pinned is not None:
            record = pinned.commit.to_json()
            checker.report.committed_length = pinned.length
        elif trouble is not None:
            checker.problem(_COMMIT, trouble)
    cfg = manifest.episodes
    checker.groups(manifest.leaf_names, cfg is not None)
    rows = manifest.rows
    leaves = {
        leaf.name: _Array(
            leaf_key(leaf.name),
            [rows, None, *leaf.shape],
            leaf.dtype,
            list(leaf.chunk),
            expect=expected_metadata(leaf, manifest.dimension_names),
        )
        for leaf in manifest.leaves
    }
    named = manifest.dimension_names
    index = [
        _Array(BOUNDS, [None, 4], "int64", None, expect=index_expect("bounds", named)),
        _Array(RETURNS, [None], "float64", None, expect=index_expect("returns", named)),
    ]
    opened = [arr for arr in leaves.values() if checker.array(arr)]
    checked = [checker.array(arr) for arr in index] if cfg is not None else [False]
    index_ok = all(checked)  # every index array checked, each problem reported
    if record is None:
        return checker.report
    length = int(record["committed_length"])
    for arr in opened:
        checker.bound_extent(arr, 1, length, "timesteps", "the commit record")
    episodes = record.get("episodes") if cfg is not None else None
    if episodes is not None and index_ok:
        for arr in index:
            checker.bound_extent(arr, 0, int(episodes["count"]), "episodes", "the commit record")
            opened.append(arr)
    checker.total = sum(math.prod(_counts(arr)) for arr in opened)
    scan = None
    if episodes is not None and index_ok:
        roles = cfg.as_dict() if cfg is not None else {}
        flags = {role: leaves[name] for role, name in roles.items() if name is not None}
        if all(arr.handle is not None for arr in flags.values()):
            seams = record.get(SEAMS_KEY, [])
            scan = EpisodeScan(checker, flags, index, episodes, seams, rows, length)
            checker.total += len(scan.starts)
    checker.trash()
    checker.tick()
    checker.chunks(opened, manifest.fill_chunks_stored)
    checker.places(manifest, record, opened)
    if scan is not None:
        gone = sum(checker.gone.get(arr.key, 0) for arr in [*scan.flags.values(), *index])
        if gone > MAX_NAMED:
            # a length or count that claims more than is stored: scanning it would read fill
            # values for what is missing, for as long as the claim
            checker.warn(
                "episodes", f"not compared with the flags: {gone} of their chunks are missing"
            )
        else:
            scan.run()
    if fingerprint is not None:
        differs = fingerprint_problem(pinned, fingerprint, searched=at is None)
        if differs is not None:
            checker.problem("fingerprint", differs)
    return checker.report
