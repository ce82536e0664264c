"""``vault verify``'s scan of the episode index against the done/truncated/reward leaves
(:class:`EpisodeScan`), a block of whole time-chunks at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from vault.format._episodes import EpisodeTable
from vault.format._records import COMMIT_KEY

SCAN_BLOCK_BYTES = 64 << 20
MAX_PER_KIND = 100  # episode mismatches listed one by one per kind; the rest are counted


class EpisodeScan:
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
        checker: Any,
        flags: dict[str, Any],
        index: list[Any],
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
        self.starts = range(0, length, per_block)  # the scan's blocks (never listed whole)
        self.per_block = per_block
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
            with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN rewards
                expected = cum[n : 2 * n] - cum[:n]
                scale = np.abs(cum[n : 2 * n]) + np.abs(cum[:n])
                tolerance = 1e-9 * (1 + np.abs(expected)) + 1e-12 * scale
                bad = np.abs(table.returns - expected) > tolerance
            # a running sum that met an inf or a NaN tells nothing about later episodes of its
            # row: those are not compared (the index sums each episode on its own)
            bad &= np.isfinite(expected) & np.isfinite(scale)
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
        for t0 in self.starts:
            t1 = min(t0 + self.per_block, self.length)
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
                with np.errstate(invalid="ignore", over="ignore"):
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
            with np.errstate(invalid="ignore", over="ignore"):
                expected = float(self.totals[row] - cum_open[row])
            if not (np.isfinite(expected) and np.isfinite(cum_open[row])):
                continue  # its running sum met an inf or a NaN: not comparable
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
