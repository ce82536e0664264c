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
import itertools
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorstore as ts

from vault._errors import VaultNotFoundError
from vault.commits._pins import fingerprint_problem, snapshot_for_check
from vault.commits._snapshot import storage_failure
from vault.format import _tags
from vault.format._episodes import EpisodeTable, index_expect
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
    RETURNS,
    SEAMS_KEY,
    TRASH_DIR,
    ZARR_JSON,
    Manifest,
    chunk_key,
    digest_problems,
    episode_record_problems,
    is_int,
    is_int_list,
    leaf_key,
    manifest_problems,
    seam_problems,
)
from vault.read._report import Problem, VerifyReport
from vault.storage._arrays import expected_metadata
from vault.storage._kinds import parse_location
from vault.storage._location import Location

if TYPE_CHECKING:
    from vault.commits._pins import Pin

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)``; units: chunks, then blocks of the episode scan."""

READ_BATCH_BYTES = 64 << 20
READ_BATCH_CHUNKS = 64
SCAN_BLOCK_BYTES = 64 << 20
MAX_PER_KIND = 100  # episode mismatches listed one by one per kind; the rest are counted
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

    def problem(self, place: str, message: str) -> None:
        self.report.problems.append(Problem(place, message))

    def warn(self, place: str, message: str) -> None:
        self.report.warnings.append(Problem(place, message))

    def tick(self, advance: int = 0) -> None:
        self.done += advance
        if self.progress is not None:
            self.progress(self.done, self.total)

    def read_json(self, key: str) -> tuple[str, Any]:
        """(``"missing"`` | ``"invalid"`` | ``"ok"``, document or error text)."""
        value = self.kv.read(key).result()
        if value.state != "value":
            return "missing", None
        try:
            return "ok", json.loads(bytes(value.value))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            return "invalid", str(err)

    # ----------------------------------------------------------------------------- metadata
    def manifest(self) -> Manifest | None:
        state, doc = self.read_json(MANIFEST_KEY)
        if state == "missing":
            raise VaultNotFoundError(f"no vault at {self.report.location} (no {MANIFEST_KEY})")
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
        bad_seams = seam_problems(record.get(SEAMS_KEY, []))
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
        for message in found:
            self.problem(key, message)
        if found or not is_int_list(chunk, 1):
            return False
        arr.chunk = list(chunk)
        encoding = meta.get("chunk_key_encoding", {"name": "default"})
        name = encoding.get("name", "default")
        sep = encoding.get("configuration", {}).get("separator")
        arr.encoding = (name, sep or ("/" if name == "default" else "."))
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
        for arr in arrays:
            prefix = f"{arr.key}/"
            listed = self.kv.list(ts.KvStore.KeyRange(prefix, prefix[:-1] + "0")).result()
            keys = {raw.decode()[len(prefix) :] for raw in listed}
            itemsize = np.dtype(arr.dtype).itemsize
            chunk_bytes = max(1, math.prod(arr.chunk or [1]) * itemsize)
            batch: list[tuple[str, Any]] = []
            absent: list[str] = []
            for index in itertools.product(*(range(n) for n in _counts(arr))):
                key = chunk_key(index, *arr.encoding)
                place = f"{arr.key} chunk {'.'.join(map(str, index))}"
                if key not in keys:
                    absent.append(key)
                    if stores_fill:
                        self.problem(
                            place,
                            f"chunk file {arr.key}/{key} is missing (its values would read as "
                            "the fill value)",
                        )
                    self.tick(1)
                    continue
                region = tuple(
                    slice(i * c, min((i + 1) * c, e))
                    for i, c, e in zip(index, arr.chunk or [], arr.extent, strict=True)
                )
                batch.append((place, arr.handle[region].read()))
                if len(batch) >= READ_BATCH_CHUNKS or len(batch) * chunk_bytes >= READ_BATCH_BYTES:
                    self.settle(batch)
            self.settle(batch)
            if absent and not stores_fill:
                self.absent_warning(arr, absent)

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

    def absent_warning(self, arr: _Array, absent: list[str]) -> None:
        """Chunk files absent from a vault whose writer may leave out fill-valued chunks."""
        listed = ", ".join(absent[:8]) + (
            f", ... ({len(absent)} in all)" if len(absent) > 8 else ""
        )
        self.warn(
            arr.key,
            f"{len(absent)} chunk files absent ({listed}); they read as the fill value "
            f"({arr.handle.fill_value}). This vault's writer leaves out chunks that hold only "
            "the fill value, so a deleted chunk cannot be told from such a chunk",
        )

    def settle(self, batch: list[tuple[str, Any]]) -> None:
        for place, future in batch:
            try:
                future.result()
            except ValueError as err:
                typed = storage_failure(self.location, err)
                if typed is not None:  # not the data: the storage would not give it
                    raise typed from err
                self.problem(place, f"corrupt: {_one_line(err)}")
        self.report.chunks_checked += len(batch)
        self.tick(len(batch))
        batch.clear()


def _one_line(err: BaseException | str) -> str:
    return " ".join(str(err).split())


def _counts(arr: _Array) -> list[int]:
    return [math.ceil(e / c) for e, c in zip(arr.extent, arr.chunk or [], strict=True)]


# --------------------------------------------------------------------------------- episodes
class _EpisodeScan:
    """The episode index against the flags: recomputed from the done/truncated/reward leaves
    a block of whole time-chunks (all rows) at a time.

    Checked: every episode that the index or the commit record's open record names lies inside
    the data; the ends of indexed episodes are exactly the timesteps where ``done`` or
    ``truncated`` is set (each once); how each ended (truncated or terminated); its return is
    the sum of the reward leaf over it; episodes of a row do not overlap. An episode that
    starts later than the previous one ended is a warning unless a recorded seam (a gap or a
    restart) explains it: vaults written before restarts were recorded have such stretches.
    """

    def __init__(
        self,
        checker: _Checker,
        flags: dict[str, _Array],
        index: list[_Array],
        record: dict[str, Any],
        gaps: list[dict[str, int]],
        rows: int,
        length: int,
    ) -> None:
        self.checker, self.flags, self.index, self.record = checker, flags, index, record
        self.gap_starts = {int(g["at"]) for g in gaps}
        self.rows, self.length = rows, length
        chunk_t = int((flags["done"].chunk or [1, 1])[1])
        per_block = max(1, SCAN_BLOCK_BYTES // (rows * 32) // chunk_t) * chunk_t
        self.edges = [*range(0, length, per_block), length] if length else [0]
        self.shown: dict[str, int] = {}
        self.totals = np.zeros(rows, np.float64)

    def problem(self, kind: str, place: str, message: str) -> None:
        count = self.shown[kind] = self.shown.get(kind, 0) + 1
        if count <= MAX_PER_KIND:
            self.checker.problem(place, message)

    def run(self) -> None:
        table = self.load()
        if table is None:
            return
        self.checker.report.episodes_checked = len(table)
        has_reward = "reward" in self.flags
        ends_at = table.start + table.length - 1
        keys = table.row * (self.length + 1) + ends_at
        opened = self.record["open"]
        q_rows = np.concatenate([table.row, table.row, np.arange(self.rows)])
        q_t = np.concatenate([table.start, ends_at + 1, np.asarray(opened["start"], np.int64)])
        scanned = self.scan(q_rows, q_t, has_reward)
        if scanned is None:
            return
        flag_keys, cut, cum = scanned
        self.compare_ends(table, keys, flag_keys, cut)
        if has_reward:
            n = len(table)
            expected = cum[n : 2 * n] - cum[:n]
            scale = np.abs(cum[n : 2 * n]) + np.abs(cum[:n])
            bad = np.abs(table.returns - expected) > 1e-9 * (1 + np.abs(expected)) + 1e-12 * scale
            for i in np.flatnonzero(bad):
                self.problem(
                    "return",
                    self.place(table, int(i)),
                    f"return {float(table.returns[i])!r} but the reward leaf sums to "
                    f"{float(expected[i])!r}",
                )
            self.check_open(cum[2 * n :], opened)
        self.check_tiling(table, opened)
        for kind, count in self.shown.items():
            if count > MAX_PER_KIND:
                self.checker.problem(
                    "episodes/bounds", f"... and {count - MAX_PER_KIND} more {kind} problems"
                )

    def place(self, table: EpisodeTable, i: int) -> str:
        return (
            f"episodes/bounds entry {i} (row {table.row[i]}, start {table.start[i]}, "
            f"length {table.length[i]})"
        )

    def load(self) -> EpisodeTable | None:
        count = int(self.record["count"])
        bounds_arr, returns_arr = self.index
        try:
            bounds = np.asarray(bounds_arr.handle[: bounds_arr.extent[0]].read().result())
            returns = np.asarray(returns_arr.handle[: returns_arr.extent[0]].read().result())
        except ValueError:
            self.checker.warn("episodes", "index unreadable (see its chunks); not compared")
            return None
        if bounds.shape[0] < count or returns.shape[0] < count:
            return None  # reported by bound_extent
        table = EpisodeTable.from_bounds(bounds, returns, has_reward="reward" in self.flags)
        valid = (
            (table.row >= 0)
            & (table.row < self.rows)
            & (table.start >= 0)
            & (table.length >= 1)
            & (table.start + table.length <= self.length)
            & ((bounds[:, 3] & ~3) == 0)
        )
        for i in np.flatnonzero(~valid):
            self.problem(
                "range",
                self.place(table, int(i)),
                f"outside the data ({self.rows} rows x {self.length} timesteps) or bad flags "
                f"{bounds[i, 3]}",
            )
        return table[np.flatnonzero(valid)] if not valid.all() else table

    def scan(
        self, q_rows: np.ndarray, q_t: np.ndarray, has_reward: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Ends found in the flags (keys ``row * (length + 1) + t``), whether each is a
        truncation, and the cumulative reward ``sum(reward[row, :t])`` at each query."""
        order = np.argsort(q_t, kind="stable")
        sorted_t = q_t[order]
        cum = np.zeros(q_t.shape, np.float64)
        running = np.zeros(self.rows, np.float64)
        found_keys, found_cut = [], []
        for t0, t1 in itertools.pairwise(self.edges):
            try:
                done = self.read("done", t0, t1).astype(bool)
                trunc = self.read("truncated", t0, t1) if "truncated" in self.flags else None
                reward = self.read("reward", t0, t1) if has_reward else None
            except ValueError:
                self.checker.warn("episodes", "flags unreadable (see their chunks); not compared")
                return None
            ended = done if trunc is None else done | trunc.astype(bool)
            r_idx, t_idx = np.nonzero(ended)
            found_keys.append(r_idx * (self.length + 1) + t0 + t_idx)
            cut = np.zeros(r_idx.shape, bool)
            if trunc is not None:
                cut = trunc.astype(bool)[r_idx, t_idx] & ~done[r_idx, t_idx]
            found_cut.append(cut)
            if reward is not None:
                block = np.cumsum(reward.astype(np.float64), axis=1) + running[:, None]
                lo, hi = np.searchsorted(sorted_t, [t0 + 1, t1 + 1])
                picked = order[lo:hi]
                cum[picked] = block[q_rows[picked], q_t[picked] - t0 - 1]
                running = block[:, -1]
            self.checker.tick(1)
        self.totals = running  # sum of the reward over every committed timestep, per row
        keys = np.concatenate(found_keys) if found_keys else np.zeros(0, np.int64)
        cuts = np.concatenate(found_cut) if found_cut else np.zeros(0, bool)
        return keys, cuts, cum

    def read(self, role: str, t0: int, t1: int) -> np.ndarray:
        return np.asarray(self.flags[role].handle[:, t0:t1].read().result())

    def compare_ends(
        self, table: EpisodeTable, keys: np.ndarray, flag_keys: np.ndarray, cut: np.ndarray
    ) -> None:
        span = self.length + 1
        unique, first, counts = np.unique(keys, return_index=True, return_counts=True)
        for key, i in zip(unique[counts > 1], first[counts > 1], strict=True):
            self.problem(
                "duplicate",
                self.place(table, int(i)),
                f"{int(np.sum(keys == key))} indexed episodes end at row {key // span}, "
                f"t={key % span}",
            )
        for i in np.flatnonzero(~np.isin(keys, flag_keys)):
            self.problem(
                "end",
                self.place(table, int(i)),
                f"ends at t={table.start[i] + table.length[i] - 1}, where neither done nor "
                "truncated is set",
            )
        for key in flag_keys[~np.isin(flag_keys, keys)]:
            self.problem(
                "missing",
                f"{self.flags['done'].key} row {key // span}, t={key % span}",
                "an episode ends here (done/truncated set) but the index has no such episode",
            )
        position = {int(k): j for j, k in enumerate(flag_keys)}
        for i, key in enumerate(keys):
            j = position.get(int(key))
            if j is not None and bool(cut[j]) != bool(table.truncated[i]):
                how = "truncated" if table.truncated[i] else "terminated"
                flags = "truncated" if cut[j] else "terminated"
                self.problem(
                    "truncated", self.place(table, i), f"indexed as {how} but the flags say {flags}"
                )

    def check_open(self, cum_open: np.ndarray, opened: dict[str, list[Any]]) -> None:
        for row in range(self.rows):
            start = int(opened["start"][row])
            if start >= self.length:
                continue
            got = float(opened["return"][row])
            expected = float(self.totals[row] - cum_open[row])
            if abs(got - expected) > 1e-9 * (1 + abs(expected)) + 1e-12 * abs(cum_open[row]):
                self.problem(
                    "return",
                    f"{COMMIT_KEY} open episode of row {row} (start {start})",
                    f"return so far {got!r} but the reward leaf sums to {expected!r}",
                )

    def check_tiling(self, table: EpisodeTable, opened: dict[str, list[Any]]) -> None:
        """Episodes of a row (the open one last) must not overlap; a start later than the
        previous stop is only warned about unless a recorded gap explains it."""
        rows = np.concatenate([table.row, np.arange(self.rows)])
        starts = np.concatenate([table.start, np.asarray(opened["start"], np.int64)])
        stops = np.concatenate([table.start + table.length, np.full(self.rows, self.length)])
        order = np.lexsort((starts, rows))
        r, s = rows[order], starts[order]
        # Running maximum of the stops within each row: keys of later rows exceed earlier ones.
        key = r * (self.length + 2) + stops[order]
        before = np.concatenate([[0], np.maximum.accumulate(key)[:-1]]) - r * (self.length + 2)
        first = np.concatenate([[True], r[1:] != r[:-1]])
        previous = np.where(first, 0, before)
        n = len(table)
        for k in np.flatnonzero(s < previous):
            j = int(order[k])
            self.problem(
                "overlap",
                self.where(table, j, n, int(r[k]), int(s[k])),
                f"overlaps the previous episode of the row (which ends at t={previous[k] - 1})",
            )
        later = np.flatnonzero((s > previous) & ~np.isin(s, list(self.gap_starts)))
        if len(later):
            places = [f"row {r[k]} t={previous[k]}..{s[k] - 1}" for k in later[:8]]
            more = f" and {len(later) - 8} more" if len(later) > 8 else ""
            self.checker.warn(
                "episodes",
                f"{len(later)} stretches of timesteps belong to no episode ({', '.join(places)}"
                f"{more}): an episode starts after the previous one of its row stopped, with no "
                "recorded seam there. Expected in vaults written before rlvault recorded "
                "restarts (append(..., continues=False), the seams of combined vaults)",
            )

    def where(self, table: EpisodeTable, j: int, n: int, row: int, start: int) -> str:
        if j >= n:
            return f"{COMMIT_KEY} open episode of row {row} (start {start})"
        return self.place(table, j)


# --------------------------------------------------------------------------------- entry
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
        location_or_vault: the vault's path or URL, or an open :class:`Vault`.
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
    """
    if hasattr(location_or_vault, "snapshot"):  # an open Vault
        location = location_or_vault.snapshot.location
    else:
        location = parse_location(location_or_vault)
    checker = _Checker(location, progress)
    manifest = checker.manifest()
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
            scan = _EpisodeScan(checker, flags, index, episodes, seams, rows, length)
            checker.total += len(scan.edges) - 1
    checker.trash()
    checker.tick()
    checker.chunks(opened, manifest.fill_chunks_stored)
    checker.places(manifest, record, opened)
    if scan is not None:
        scan.run()
    if fingerprint is not None:
        differs = fingerprint_problem(pinned, fingerprint, searched=at is None)
        if differs is not None:
            checker.problem("fingerprint", differs)
    return checker.report
