"""A vault made by an attacker is safe to open (``docs/safety.md``).

Hypothesis builds hostile vaults from a small sound one: metadata that lies while staying
valid JSON with recomputed digests (an attacker can recompute them: they are checksums, not
signatures) and files that are not what a writer makes. A child process
(``_hostile_worker.py``) runs every read-only operation on each: open, reads (numpy, a
window, a buffer state, a pinned commit), a stream, episodes, statistics, verify, the
fingerprint and the ``vault`` commands ``info``, ``stats``, ``episodes``, ``verify`` and
``ls``. For every example:

* each operation ends with a typed :class:`~vault.VaultError` or with the vault's true data
  (the values stored, never others: a lie that shrinks a shape reads true values);
* nothing under the example's folder changes (files, sizes, modification times, contents,
  links), the vault and what lies beside it;
* nothing outside the vault is read: its links point at a FIFO outside it, which would
  block the reader for ever (a hang);
* no module named by the vault is imported (a payload beside the vault, importable from the
  child's ``sys.path``, would leave a marker);
* no operation hangs: the child answers within ``TIMEOUT`` seconds (a hang fails the test;
  how long the operations take is measured by ``tools/bench_hostile.py``, not here);
* the child's peak resident memory during the operations rises at most ``MEMORY_BOUND``
  above what it held before them (the peak is reset through ``/proc/self/clear_refs`` and
  read as ``VmHWM``; the child is warmed up on the sound vault first, so imports and caches
  are not counted). The sound vault's data is 3 KiB: whatever a lie claims, every
  operation's memory is the data asked for (a few KiB) plus a bounded overhead. (Peak
  resident memory rather than an address-space limit with ``setrlimit(RLIMIT_AS)``:
  TensorStore and JAX reserve gigabytes of address space for thread stacks and allocator
  arenas that they never touch, so any such limit low enough to mean something breaks a
  sound read.)
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vault import Dataset, Vault
from vault.format._records import digest
from vault.storage._arrays import dimension_names

WORKER = Path(__file__).with_name("_hostile_worker.py")
ROWS, STEPS = 3, 45
CHUNKS = {"obs": [1, 8, 4], "reward": [3, 8], "done": [3, 8]}
TIMEOUT = 180  # seconds for one example's operations (all of them) before it is a hang
MEMORY_BOUND = 200 << 10  # KiB of peak resident memory beyond the warm-up's
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "40"))  # and the explicit ones below


def _data(t0: int, n: int) -> dict[str, np.ndarray]:
    t = np.arange(t0, t0 + n)
    rows = np.arange(ROWS)[:, None]
    return {
        "obs": (t[None, :, None] * 0.5 + rows[..., None] + np.arange(4)).astype(np.float32),
        "reward": np.sin(t[None] + rows).astype(np.float32),
        "done": (t[None] + rows) % 7 == 6,
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "v"
    example = {k: v[0, 0] for k, v in _data(0, 1).items()}
    with Vault.create(
        str(path), example, rows=ROWS, chunk=CHUNKS, done_leaf="done", reward_leaf="reward"
    ) as v:
        for t0, n in ((0, 13), (13, 20), (33, 12)):  # three commits: pins 1 and 2 exist
            v.append(_data(t0, n))
    return path


# ------------------------------------------------------------------------------ the child
class Worker:
    """``_hostile_worker.py`` as a child process, restarted after a hang or a crash."""

    def __init__(self, pristine: Path, folder: Path) -> None:
        self.pristine, self.folder = pristine, folder
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.pristine)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=self.folder,
        )
        warm = self.folder / "warm"
        shutil.rmtree(warm, ignore_errors=True)
        shutil.copytree(self.pristine, warm / "v")
        answer = self.ask(warm / "v")
        sound = {op: o for op, o in answer["outcomes"].items() if o != "ok"}
        assert not sound, f"the sound vault does not read: {sound}"

    def ask(self, path: Path) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        proc = self.proc
        assert proc is not None
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps({"path": str(path)}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise AssertionError(
                f"the operations on {path} did not finish within {TIMEOUT} s (a hang)"
                if not ready
                else f"the child died on {path} (status {proc.wait()}): a crash"
            )
        return json.loads(line)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
        self.proc = None


@pytest.fixture(scope="module")
def worker(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    child = Worker(pristine, tmp_path_factory.mktemp("worker"))
    child.start()
    yield child
    child.stop()


# ------------------------------------------------------------------------------ the lies
def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _save(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` with the record it holds (manifest or commit record) re-digested, as an
    attacker would."""
    for attr in ("rlvault", "rlvault_commit"):
        record = doc.get("attributes", {}).get(attr)
        if isinstance(record, dict) and "digest" in record:
            record["digest"] = digest(record)
    path.write_text(json.dumps(doc))


def _edit(path: Path, edit: Callable[[dict[str, Any]], None], attr: str | None = None) -> None:
    doc = _load(path)
    edit(doc["attributes"][attr] if attr else doc)
    _save(path, doc)


def manifest(root: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    _edit(root / "zarr.json", edit, "rlvault")


def record(root: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    _edit(root / "commit" / "zarr.json", edit, "rlvault_commit")


def array(root: Path, key: str, edit: Callable[[dict[str, Any]], None]) -> None:
    _edit(root / key / "zarr.json", edit)


def _leaf(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(leaf for leaf in doc["leaves"] if leaf["name"].split("/")[-1] == name)


def lie_rows(root: Path, rows: int) -> None:
    manifest(root, lambda m: m.update(rows=rows))
    for name in CHUNKS:
        array(root, f"experience/{name}", lambda a: a["shape"].__setitem__(0, rows))

    def per_row(r: dict[str, Any]) -> None:
        if rows > 64:
            return  # per-row lists this long: left short (an inconsistent record)
        for column in ("start", "return", "flags"):
            values = r["episodes"]["open"][column]
            r["episodes"]["open"][column] = (values * rows)[:rows]
        for edge in r["edges"].values():
            if len(edge["crc"]) > 1:
                edge["crc"] = (edge["crc"] * rows)[:rows]

    record(root, per_row)


def lie_length(root: Path, length: int) -> None:
    def edit(r: dict[str, Any]) -> None:
        r["committed_length"] = length
        for key, edge in list(r["edges"].items()):
            step = 8
            if key.startswith("experience/"):
                if length % step:
                    edge["from"] = length // step * step
                else:
                    del r["edges"][key]
        r["episodes"]["open"]["start"] = [min(s, length) for s in r["episodes"]["open"]["start"]]
        r["gaps"] = [g for g in r["gaps"] if g["at"] <= length]

    record(root, edit)
    for name in CHUNKS:
        array(root, f"experience/{name}", lambda a: a["shape"].__setitem__(1, max(length, 45)))


def lie_count(root: Path, count: int) -> None:
    def edit(r: dict[str, Any]) -> None:
        r["episodes"]["count"] = count
        for key in ("episodes/bounds", "episodes/returns"):
            if count % 8192:
                r["edges"][key] = {
                    **r["edges"].get(key, {"crc": [0]}),
                    "from": count // 8192 * 8192,
                }
            else:
                r["edges"].pop(key, None)

    record(root, edit)
    for key in ("episodes/bounds", "episodes/returns"):
        array(root, key, lambda a: a["shape"].__setitem__(0, max(count, a["shape"][0])))


def lie_item(root: Path, shape: list[int]) -> None:
    chunk = [1, 8, *shape]
    manifest(root, lambda m: _leaf(m, "obs").update(shape=shape, chunk=chunk))

    def edit(a: dict[str, Any]) -> None:
        a["shape"] = [ROWS, a["shape"][1], *shape]
        a["chunk_grid"]["configuration"]["chunk_shape"] = chunk
        a["dimension_names"] = dimension_names("obs", len(shape))

    array(root, "experience/obs", edit)


def lie_chunk(root: Path, chunk: list[int]) -> None:
    manifest(root, lambda m: _leaf(m, "obs").update(chunk=chunk))
    array(
        root,
        "experience/obs",
        lambda a: a["chunk_grid"]["configuration"].update(chunk_shape=chunk),
    )


def lie_dtype(root: Path, dtype: str) -> None:
    manifest(root, lambda m: _leaf(m, "reward").update(dtype=dtype))
    array(root, "experience/reward", lambda a: a.update(data_type=dtype))


CODECS: dict[str, list[dict[str, Any]]] = {
    "gzip": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "gzip", "configuration": {"level": 5}},
        {"name": "crc32c"},
    ],
    "none": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    "no crc": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "big endian": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}],
    "transpose": [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "crc32c"},
    ],
    "sharding": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [1, 1],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "crc32c"},
                ],
            },
        }
    ],
}


def lie_codecs(root: Path, which: str) -> None:
    chain = CODECS[which]
    manifest(root, lambda m: _leaf(m, "reward").update(codecs=chain))
    array(root, "experience/reward", lambda a: a.update(codecs=chain))


PAYLOAD = "from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('ran')\n"


def lie_class(root: Path, ref: str) -> None:
    """The structure names a class: a stdlib callable, or a module the attacker put beside
    the vault (the child has that folder on ``sys.path``)."""
    (root.parent / "payload_mod.py").write_text(PAYLOAD + "class Evil(tuple):\n    pass\n")
    (root / "payload_in.py").write_text(PAYLOAD)
    kind = "dataclass" if ref.endswith("!") else "namedtuple"

    def edit(m: dict[str, Any]) -> None:
        s = m["structure"]
        m["structure"] = {**s, "kind": kind, "class": ref.rstrip("!"), "fields": s["keys"]}
        m["structure"].pop("keys")

    manifest(root, edit)


def lie_seams(root: Path, seams: list[tuple[int, int]]) -> None:
    record(root, lambda r: r.update(gaps=[{"at": a, "lost": n} for a, n in seams]))


def lie_open(root: Path, values: tuple[int, int, float]) -> None:
    start, flags, ret = values
    record(
        root,
        lambda r: r["episodes"]["open"].update(
            start=[start] * ROWS, flags=[flags] * ROWS, **{"return": [ret] * ROWS}
        ),
    )


def lie_metadata(root: Path, which: str) -> None:
    if which == "deep":
        value: Any = 0
        for _ in range(150):
            value = [value]
        manifest(root, lambda m: m.update(user_metadata={"x": value}))
    elif which == "huge":
        manifest(root, lambda m: m.update(user_metadata={"x": "a" * (17 << 20)}))
    else:  # not JSON numbers: NaN and an infinity
        manifest(root, lambda m: m.update(user_metadata={"nan": float("nan"), "inf": float("inf")}))


def lie_nesting(root: Path, depth: int) -> None:
    def edit(m: dict[str, Any]) -> None:
        node = m["structure"]
        for _ in range(depth):
            node = {"kind": "list", "children": [node]}
        m["structure"] = node
        for leaf in m["leaves"]:
            leaf["name"] = "0/" * depth + leaf["name"]

    manifest(root, edit)


def _crc32c(data: bytes) -> bytes:
    import google_crc32c

    return struct.pack("<I", google_crc32c.value(data))


def _zstd_bomb(size: int) -> bytes:
    """A zstd frame without a declared size that decodes to ``size`` zero bytes (RLE blocks:
    four bytes each per 128 KiB), then its crc32c."""
    body = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")
    left = size
    while left:
        n = min(left, 1 << 17)
        left -= n
        body += ((n << 3) | (1 << 1) | (left == 0)).to_bytes(3, "little") + b"\x00"
    return bytes(body) + _crc32c(bytes(body))


def _retag(root: Path, key: str, b: int, k: int, chunk: bytes) -> None:
    """Record ``chunk``'s stored checksum as the tag of its place (row block ``b``, time chunk
    ``k``, one chunk per place), as an attacker would: in the commit record where it keeps the
    tag (format 5), else in the tag array."""
    tag = struct.unpack("<I", chunk[-4:])[0]
    commit = json.loads((root / "commit" / "zarr.json").read_bytes())
    kept = commit["attributes"]["rlvault_commit"].get("tags", {}).get(key)
    if kept is not None and k >= kept["from"]:

        def change(r: dict[str, Any]) -> None:
            values = r["tags"][key]["tags"]
            values[b * len(values) // ROWS + k - kept["from"]] = tag  # ROWS row blocks

        record(root, change)
        return
    place = root / "tags" / key / "c" / "0" / "0"
    raw = place.read_bytes()
    values = np.frombuffer(raw[:-4], "<u4").reshape(-1, 1024).copy()
    values[b, k] = tag
    body = values.tobytes()
    place.write_bytes(body + _crc32c(body))


def lie_file(root: Path, which: str) -> None:
    outside = root.parent / "outside"
    chunk = root / "experience" / "obs" / "c" / "1" / "2" / "0"
    if which == "link out":  # to a FIFO outside the vault: following it blocks
        chunk.unlink()
        chunk.symlink_to(outside / "fifo")
    elif which == "folder link out":
        shutil.copytree(root / "experience" / "reward", outside / "reward")
        (outside / "reward" / "c" / "0" / "1").unlink()
        os.mkfifo(outside / "reward" / "c" / "0" / "1")
        shutil.rmtree(root / "experience" / "reward")
        (root / "experience" / "reward").symlink_to(outside / "reward")
    elif which == "fifo":
        chunk.unlink()
        os.mkfifo(chunk)
    elif which == "dev zero":
        chunk.unlink()
        chunk.symlink_to("/dev/zero")
    elif which == "oversized":
        chunk.write_bytes(chunk.read_bytes() + b"\0" * (6 << 20))
    elif which == "zstd bomb":  # the done leaf's partly filled last chunk, 1 GiB decoded
        bomb = _zstd_bomb(1 << 30)
        (root / "experience" / "done" / "c" / "0" / "5").write_bytes(bomb)
        tail = struct.unpack("<I", bomb[-4:])[0]
        record(root, lambda r: r["edges"]["experience/done"].update(tail=[tail]))
    elif which == "blosc size":  # a complete chunk's blosc frame declares 1.9 GB
        raw = bytearray(chunk.read_bytes()[:-4])
        raw[4:8] = struct.pack("<I", 1_900_000_000)
        forged = bytes(raw) + _crc32c(bytes(raw))
        chunk.write_bytes(forged)
        _retag(root, "experience/obs", 1, 2, forged)
    elif which == "metadata fifo":
        (root / "experience" / "obs" / "zarr.json").unlink()
        os.mkfifo(root / "experience" / "obs" / "zarr.json")
    elif which == "record link out":
        shutil.copy(root / "commit" / "zarr.json", outside / "record.json")
        (root / "commit" / "zarr.json").unlink()
        (root / "commit" / "zarr.json").symlink_to(outside / "fifo")
    elif which == "huge manifest":
        with (root / "zarr.json").open("ab") as f:
            f.write(b" " * (20 << 20))
    elif which == "lock fifo":
        (root / "lock" / "zarr.json").unlink(missing_ok=True)
        os.mkfifo(root / "lock" / "zarr.json")
    elif which == "history":
        doc = _load(root / "history" / "1")
        doc["attributes"]["rlvault_commit"]["committed_length"] = 10**12
        _save(root / "history" / "1", doc)


BIG = [2**31, 10**12, 2**53, 2**62]
LIES: dict[str, tuple[Callable[[Path, Any], None], list[Any]]] = {
    "rows": (lie_rows, [1, 2, 4, 64, 10**6, *BIG]),
    "length": (lie_length, [0, 1, 44, 46, 1000, 10**6, *BIG]),
    "count": (lie_count, [0, 5, 19, 135, 136, 10**6, *BIG]),
    "item": (lie_item, [[3], [5], [], [4, 4], [10**9], [2**20, 2**20]]),
    "chunk": (lie_chunk, [[3, 8, 4], [1, 1, 4], [1, 16, 4], [1, 2**20, 4], [1, 2**26, 4]]),
    "dtype": (lie_dtype, ["int32", "float64", "float16", "object", "V4", "complex64", ">f4"]),
    "codecs": (lie_codecs, sorted(CODECS)),
    "class": (
        lie_class,
        [
            "os:system",
            "subprocess:Popen",
            "payload_mod:Evil",
            "v.payload_in:X",
            "payload_mod:Evil!",
            "shutil:rmtree!",
            "vault:Vault",
        ],
    ),
    "seams": (lie_seams, [[(3, 2)], [(46, 0)], [(0, 2**53)], [(2**62, 1)], [(45, 1)] * 5000]),
    "open": (lie_open, [(0, 0, 0.0), (46, 0, 0.0), (2**53, 0, 0.0), (44, 2**62, 1e308)]),
    "metadata": (lie_metadata, ["deep", "huge", "nan"]),
    "nesting": (lie_nesting, [2, 31, 40]),
    "file": (
        lie_file,
        [
            "link out",
            "folder link out",
            "fifo",
            "dev zero",
            "oversized",
            "zstd bomb",
            "blosc size",
            "metadata fifo",
            "record link out",
            "huge manifest",
            "lock fifo",
            "history",
        ],
    ),
}
CONCRETE = [(name, value) for name, (_, values) in sorted(LIES.items()) for value in values]
lies = st.lists(st.sampled_from(CONCRETE), min_size=1, max_size=2, unique_by=lambda lie: lie[0])


# ------------------------------------------------------------------------------ the checks
def tree(root: Path) -> dict[str, Any]:
    """Everything under ``root`` as seen without following links or opening FIFOs: type,
    size, modification time, contents' hash (files), target (links)."""
    out: dict[str, Any] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            entry: tuple[Any, ...] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
            if stat.S_ISREG(info.st_mode):
                entry += (hashlib.sha256(path.read_bytes()).hexdigest(),)
            elif stat.S_ISLNK(info.st_mode):
                entry += (os.readlink(path),)
            out[str(path.relative_to(root))] = entry
    return out


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chosen=lies)
@example(chosen=[("file", "link out")])  # every kind of file a writer never makes, at least
@example(chosen=[("file", "folder link out")])
@example(chosen=[("file", "fifo")])
@example(chosen=[("file", "dev zero")])
@example(chosen=[("file", "oversized")])
@example(chosen=[("file", "zstd bomb")])
@example(chosen=[("file", "blosc size")])
@example(chosen=[("file", "metadata fifo")])
@example(chosen=[("file", "record link out")])
@example(chosen=[("file", "huge manifest")])
@example(chosen=[("class", "v.payload_in:X")])  # a module beside the vault, importable
@example(chosen=[("length", 2**53), ("count", 2**53)])
@example(chosen=[("metadata", "deep")])
def test_a_hostile_vault_is_safe_to_open(
    chosen: list[tuple[str, Any]],
    pristine: Path,
    worker: Worker,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    job = tmp_path_factory.mktemp("hostile")
    root = job / "v"
    shutil.copytree(pristine, root)
    (job / "outside").mkdir()
    os.mkfifo(job / "outside" / "fifo")
    for name, value in chosen:
        LIES[name][0](root, value)
    before = tree(job)
    answer = worker.ask(root)
    if os.environ.get("HOSTILE_SHOW"):
        shown = {
            op: o.split(":")[0] if o == "ok" else o[:60] for op, o in answer["outcomes"].items()
        }
        print(f"\n{chosen} grew {answer['grown_kib']} KiB: {shown}")
    bad = {op: o for op, o in answer["outcomes"].items() if o.startswith(("UNTYPED", "WRONG"))}
    assert not bad, f"lies {chosen}: {bad}"
    assert not answer["marker"], f"lies {chosen}: a module named by the vault was imported"
    assert tree(job) == before, f"lies {chosen}: the operations changed files"
    grown = answer["grown_kib"]
    assert grown <= MEMORY_BOUND, f"lies {chosen}: peak memory grew by {grown} KiB"
    shutil.rmtree(job)


def test_opening_a_dataset_writes_nothing(tmp_path: Path) -> None:
    """A reader of a dataset of many shards (where a reader could keep the catalog) writes
    nothing unless asked to."""
    root = tmp_path / "ds"
    example = {k: v[0, 0] for k, v in _data(0, 1).items()}
    ds = Dataset.create(str(root), example, rows=ROWS, done_leaf="done")
    for i in range(8):
        with ds.shard(f"s{i}") as shard:
            shard.append(_data(0, 5))
    (root / "catalog").unlink()
    before = tree(root)
    Dataset.open(str(root)).episodes()
    assert tree(root) == before
    Dataset.open(str(root), write_catalog=True).episodes()  # asked: it writes the catalog
    assert (root / "catalog").is_file()
