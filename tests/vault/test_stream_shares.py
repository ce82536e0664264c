"""Data-parallel reading: one stream split over ``process_count`` processes, every share built
in this one process (``process_index = 0 .. P-1``, ``P`` in 1..3) over small drawn vaults and
datasets of shards (rows 1-4, appends of 0-24 timesteps with seams between them, time chunks
of 1-5).

Checked against a brute-force model (``code = source * SOURCE + row * CODE + t``): the shares
of an epoch are disjoint, their union is the single-process epoch less fewer than ``P``
sequences, each share is exactly its slice ``[p * q, (p + 1) * q)`` of the epoch's order
(shuffled with one seed, every share agrees on it), every batch has the local batch size,
every share yields the same number of batches (``drop_remainder`` or not), a state taken in
any share resumes to exactly its remaining batches (also after more data was appended), and
``stack=`` with ``cut_on_device=False`` hands over exactly the unstacked share's batches.
Real vaults in temp dirs (docs/guides/several-hosts.md, vault/stream/_layout.py).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault import Dataset, Vault, VaultReadError, resume_stream
from vault.stream._batch import StreamBatch

CODE = 1_000
SOURCE = 100_000
Seq = tuple[int, int, int]  # (source, row, start)

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)


# --------------------------------------------------------------------------------------------
# drawn data and the model
# --------------------------------------------------------------------------------------------
@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    """A vault (one source) or a dataset of 2 shards, each written in 1-3 appends with seams
    between them, and the stream's options."""
    n_sources = draw(st.integers(1, 2))
    chunk_t = draw(st.integers(1, 5))
    sources = []
    for _ in range(n_sources):
        rows = draw(st.integers(1, 4))
        pieces = draw(st.lists(st.integers(0, 24), min_size=1, max_size=3))
        sources.append((rows, pieces))
    seq = draw(st.integers(1, 4))
    if all(sum(p) < seq for _, p in sources):  # the longest source holds a sequence
        sources[0] = (sources[0][0], [*sources[0][1], seq + draw(st.integers(0, 8))])
    return {
        "sources": sources,
        "chunk_t": chunk_t,
        "seq": seq,
        "local": draw(st.integers(1, 3)),
        "stride": draw(st.integers(1, 2)),
        "block_timesteps": draw(st.one_of(st.none(), st.integers(seq, seq + 6))),
        "block_rows": draw(st.one_of(st.none(), st.integers(1, 3))),
        "interleave": draw(st.integers(1, 2)),
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 3)),
        "drop_remainder": draw(st.booleans()),
        "prefetch": draw(st.sampled_from([0, 2])),
        "episode_aware": draw(st.booleans()),
    }


def code_of(source: int, rows: int, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Timesteps ``[lo, hi)`` of a source: ``code`` says where each is; episodes end where
    ``done_at``."""
    r, t = np.arange(rows)[:, None], np.arange(lo, hi)[None]
    return {"code": (source * SOURCE + r * CODE + t).astype(np.int32), "done": done_at(r, t)}


def done_at(row: Any, t: Any) -> Any:
    return (t * 5 + row * 3 + 1) % 7 == 0


def write(root: Path, spec: dict[str, Any]) -> tuple[Any, list[Vault]]:
    """The drawn sources, written: a Vault alone, or a Dataset with its shards' writers
    (still open, to append later)."""
    example = {"code": np.int32(0), "done": np.bool_(False)}
    chunk_t = int(spec["chunk_t"])
    chunk: dict[str, Sequence[int]] = {"code": [1, chunk_t], "done": [1, chunk_t]}
    writers: list[Vault] = []
    if len(spec["sources"]) == 1:
        rows, _ = spec["sources"][0]
        writers.append(
            Vault.create(str(root / "v"), example, rows=rows, chunk=chunk, done_leaf="done")
        )
        owner: Any = None
    else:
        owner = Dataset.create(str(root / "d"), example, chunk=chunk, rows=1, done_leaf="done")
        for s, (rows, _) in enumerate(spec["sources"]):
            writers.append(owner.shard(f"s{s}", rows=rows))
    for s, ((rows, pieces), w) in enumerate(zip(spec["sources"], writers, strict=True)):
        at = 0
        for i, n in enumerate(pieces):
            if n:
                w.append(code_of(s, rows, at, at + n), continues=i == 0)
                at += n
            elif i:  # an empty append that starts a new run: the seam comes with the next
                w.append(code_of(s, rows, at, at), continues=False)
    for w in writers:
        w.flush()
    if owner is not None:  # a shard enters the catalog when its writer closes
        for w in writers:
            w.close()
    return owner, writers


def append_more(owner: Any, writers: list[Vault], s: int, data: dict[str, Any]) -> None:
    """Append to source ``s`` (a dataset's shard: reopened for appending, then closed)."""
    if owner is None:
        writers[s].append(data, continues=False)
        writers[s].flush()
        return
    with owner.shard(f"s{s}") as w:
        w.append(data, continues=False)


def close(owner: Any, writers: list[Vault]) -> None:
    if owner is None:
        writers[0].close()
    else:
        owner.close()


def reader(root: Path, spec: dict[str, Any]) -> Any:
    if len(spec["sources"]) == 1:
        return Vault.open(str(root / "v"))
    return Dataset.open(str(root / "d"))


def model(spec: dict[str, Any]) -> set[Seq]:
    """Every (source, row, start) an epoch must yield, by brute force."""
    seq, stride, out = spec["seq"], spec["stride"], set()
    for s, (rows, pieces) in enumerate(spec["sources"]):
        total = sum(pieces)
        bounds = {int(a) for a in np.cumsum(pieces) if 0 < a < total}
        for r in range(rows):
            for t in range(0, total - seq + 1, stride):
                if any(t < a <= t + seq - 1 for a in bounds):
                    continue
                if spec["episode_aware"] and any(done_at(r, u) for u in range(t, t + seq - 1)):
                    continue
                out.add((s, r, t))
    return out


def seqs(batches: list[Any], seq: int) -> list[Seq]:
    """The sequences of a list of (unstacked) batches, each one's data checked."""
    out: list[Seq] = []
    for b in batches:
        code = np.asarray(b.experience["code"])
        want = (b.source * SOURCE + b.row * CODE + b.start)[:, None] + np.arange(seq)
        np.testing.assert_array_equal(code, want)
        out += list(zip(b.source.tolist(), b.row.tolist(), b.start.tolist(), strict=True))
    return out


def options(spec: dict[str, Any], **over: Any) -> dict[str, Any]:
    kw = {
        k: spec[k]
        for k in (
            "stride", "block_timesteps", "block_rows", "interleave", "shuffle", "seed",
            "drop_remainder", "prefetch", "episode_aware",
        )
    }  # fmt: skip
    kw.update(device_put=False, epochs=1)
    kw.update(over)
    return kw


def canonical_order(src: Any, spec: dict[str, Any]) -> list[Seq]:
    """The epoch's order of sequences as the layout documents it: the epoch's block order
    (seen from a one-process stream with ``interleave=1``, where each group is one block),
    and inside each block time-major (every row at ``t``, then ``t + 1``)."""
    ref = src.as_dataset(1, spec["seq"], **options(spec, interleave=1, drop_remainder=False))
    found = seqs(list(ref), spec["seq"])
    head, block, brows = spec["seq"] - 1, ref.block_timesteps, ref.block_rows
    ref.close()

    def block_of(x: Seq) -> tuple[int, int, int]:
        return x[0], x[1] // brows, (x[2] + head) // block

    blocks: dict[tuple[int, int, int], list[Seq]] = {}
    for x in found:
        blocks.setdefault(block_of(x), []).append(x)
    return [x for members in blocks.values() for x in sorted(members, key=lambda y: (y[2], y[1]))]


def share_stream(src: Any, spec: dict[str, Any], p: int, n: int, **over: Any) -> Any:
    return src.as_dataset(
        spec["local"] * n, spec["seq"], **options(spec, process_index=p, process_count=n, **over)
    )


def expected_batches(q: int, local: int, drop: bool) -> list[int]:
    sizes = [local] * (q // local)
    if q % local and not drop:
        sizes.append(q % local)
    return sizes


# --------------------------------------------------------------------------------------------
# shares of one epoch
# --------------------------------------------------------------------------------------------
@SETTINGS
@given(spec=layouts())
def test_shares_are_the_documented_slices_of_one_epoch(spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        owner, writers = write(root, spec)
        src = reader(root, spec)
        want = model(spec)
        if not want:  # no valid sequence at all: the documented VaultReadError
            try:
                canonical_order(src, spec)
            except VaultReadError:
                close(owner, writers)
                return
            raise AssertionError("an epoch without a valid sequence yielded one")
        order = canonical_order(src, spec)
        assert len(order) == len(set(order))  # the one-process epoch: each start once ...
        assert set(order) == want  # ... none missing, none across a seam
        for n in (1, 2, 3):
            q = len(order) // n
            sizes = expected_batches(q, spec["local"], spec["drop_remainder"])
            shares: list[list[Seq]] = []
            for p in range(n):
                stream = share_stream(src, spec, p, n)
                assert (stream.process_index, stream.process_count) == (p, n)
                assert stream.local_batch_size == spec["local"]
                if not sizes:  # too few sequences for one batch: documented VaultReadError
                    try:
                        got = list(stream)
                    except VaultReadError:
                        stream.close()
                        continue
                    raise AssertionError(f"share {p}/{n} yielded {got} from {q} sequences")
                batches = list(stream)
                stream.close()
                assert [b.row.shape[0] for b in batches] == sizes, (p, n, q)
                shares.append(seqs(batches, spec["seq"]))
            if not sizes:
                continue
            every = [x for share in shares for x in share]
            assert len(every) == len(set(every)) == n * sum(sizes)  # disjoint, balanced
            assert set(every) <= want
            for p, share in enumerate(shares):
                mine = set(order[p * q : (p + 1) * q])
                if spec["drop_remainder"]:  # less its last incomplete batch
                    assert set(share) <= mine, (p, n)
                else:
                    assert sorted(share) == sorted(mine), (p, n)
            if not spec["drop_remainder"]:
                assert set(order) - set(every) == set(order[n * q :])  # the last < n dropped
        close(owner, writers)


# --------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------
@SETTINGS
@given(spec=layouts(), at=st.integers(0, 4), epochs=st.integers(1, 2))
def test_a_state_of_any_share_resumes_its_remaining_batches_after_appends(
    spec: dict[str, Any], at: int, epochs: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        owner, writers = write(root, spec)
        src = reader(root, spec)
        n_total = len(model(spec))
        for n in (2, 3):
            q = n_total // n
            per_epoch = len(expected_batches(q, spec["local"], spec["drop_remainder"]))
            if per_epoch == 0:
                continue
            k = min(at, per_epoch * epochs)
            runs, states = [], []
            for p in range(n):
                stream = share_stream(src, spec, p, n, epochs=epochs)
                it = iter(stream)
                head = [next(it) for _ in range(k)]
                states.append(json.loads(json.dumps(stream.state())))
                rest = list(it)
                stream.close()
                assert len(head) + len(rest) == per_epoch * epochs
                runs.append(rest)
            # one state (any process's) resumes them all: after k batches they are the same
            assert all(s == states[0] for s in states), (n, k)
            runs_key = [[(b.epoch, seqs([b], spec["seq"])) for b in rest] for rest in runs]
            # more data (and a seam) arrive before the resume: the state's pins hold
            for s, (rows, pieces) in enumerate(spec["sources"]):
                end = sum(pieces) + 100 * (n + 1)
                append_more(owner, writers, s, code_of(s, rows, end, end + 5))
            for p in range(n):
                again = resume_stream(states[(p + 1) % n], process_index=p)
                got = [(b.epoch, seqs([b], spec["seq"])) for b in again]
                again.close()
                assert got == runs_key[p], (p, n, k)
        close(owner, writers)


# --------------------------------------------------------------------------------------------
# stacks of a share
# --------------------------------------------------------------------------------------------
@SETTINGS
@given(spec=layouts(), stack=st.integers(1, 3), at=st.integers(0, 3))
def test_stacked_shares_are_the_unstacked_shares_batches(
    spec: dict[str, Any], stack: int, at: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        owner, writers = write(root, spec)
        src = reader(root, spec)
        n_total = len(model(spec))
        for n in (1, 2, 3):
            q = n_total // n
            sizes = expected_batches(q, spec["local"], spec["drop_remainder"])
            if not sizes:
                continue
            states = []
            for p in range(n):
                plain = share_stream(src, spec, p, n)
                flat = [(b.epoch, seqs([b], spec["seq"])) for b in plain]
                plain.close()
                stacked = share_stream(src, spec, p, n, stack=stack, cut_on_device=False)
                items = list(stacked)
                stacked.close()
                unstacked = []
                whole = len([s for s in sizes if s == spec["local"]])
                for item in items:
                    code = np.asarray(item.experience["code"])
                    assert code.ndim == 3
                    assert code.shape[2] == spec["seq"]
                    assert code.shape[:2] == item.row.shape == item.start.shape
                    assert code.shape[0] <= stack
                    for j in range(code.shape[0]):
                        one = StreamBatch(
                            {"code": code[j]}, item.row[j], item.start[j], item.epoch,
                            item.source[j],
                        )  # fmt: skip
                        unstacked.append((item.epoch, seqs([one], spec["seq"])))
                assert unstacked == flat, (p, n, stack)
                # stack k holds batches [k * stack, (k + 1) * stack) of the whole ones
                want_shapes = [min(stack, whole - i) for i in range(0, whole, stack)]
                if len(sizes) > whole:
                    want_shapes.append(1)
                assert [np.asarray(i.experience["code"]).shape[0] for i in items] == want_shapes
                # a state taken after `k` batches (counted in batches, not stacks) resumes
                stacked = share_stream(src, spec, p, n, stack=stack, cut_on_device=False)
                it, seen = iter(stacked), 0
                while seen < min(at, len(sizes)):
                    seen += next(it).row.shape[0]
                states.append(stacked.state())
                stacked.close()
                again = resume_stream(stacked.state(), process_index=p)
                rest = []
                for item in again:
                    code = np.asarray(item.experience["code"])
                    for j in range(code.shape[0]):
                        rest.append((item.epoch, item.row[j].tolist(), item.start[j].tolist()))
                again.close()
                want_rest = [(e, [x[1] for x in s], [x[2] for x in s]) for e, s in flat[seen:]]
                assert rest == want_rest, (p, n, stack, seen)
        close(owner, writers)
