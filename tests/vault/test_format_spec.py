"""The format specification (docs/format.md) against what rlvault writes.

One scenario (built once per module) uses every feature of the format: a vault with episodes,
seams (an overrun saved with ``on_overrun="save_surviving"`` and a restart), a ring that
wrapped, tags and pinned commits, escaped node names, several row blocks and item chunks, every
codec, an episode index with a complete chunk, a vault on the real S3 test server (walked while
its writer holds the lease, and again after it closed), and datasets of shards with their
catalog, local and on S3.

* Every JSON object found in those stores validates against its JSON Schema
  (``docs/schemas/``), every key of the stores is one the specification names, and every
  schema refuses an unknown key.
* ``tools/spec_reader.py``, a reader written from the specification alone, reads the same
  data, episode tables, commit ids, seams, tags and fingerprints as rlvault on every vault of
  the scenario, at every commit (by number, by id and by tag), and refuses what the
  specification says a reader must refuse.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import vault
from buffers.trajectory_buffer import TrajectoryBufferState
from vault import Dataset, Vault
from vault.write import _create

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"
sys.path.insert(0, str(ROOT / "tools"))
import spec_reader  # noqa: E402

ROWS = 3
RING = 8  # the time axis of the buffer the main vault is written from


class Pair(NamedTuple):
    left: Any
    right: Any


def timestep() -> dict[str, Any]:
    """One timestep of the main vault: nested containers and keys that need escaping."""
    return {
        "obs": np.zeros(3, np.float32),
        "done": np.zeros((), bool),
        "cut": np.zeros((), bool),
        "reward": np.zeros((), np.float32),
        "extra": Pair(np.zeros((2, 2), np.uint8), [np.zeros((), np.int16)]),
        "odd": {
            ".hidden": np.zeros((), np.float16),
            "zarr.json": np.zeros((), np.int64),
            "": np.zeros((), np.uint32),
        },
    }


def steps(rng: np.random.Generator, n: int) -> dict[str, Any]:
    """``n`` random timesteps of every row, shaped like :func:`timestep`."""

    def block(x: np.ndarray) -> np.ndarray:
        shape = (ROWS, n, *x.shape)
        if x.dtype == np.bool_:
            return rng.random(shape) < 0.25
        return (rng.random(shape) * 100).astype(x.dtype)

    example = timestep()
    out = {k: block(v) for k, v in example.items() if isinstance(v, np.ndarray)}
    out["cut"] &= ~out["done"]
    out["extra"] = Pair(block(example["extra"].left), [block(example["extra"].right[0])])
    out["odd"] = {k: block(v) for k, v in example["odd"].items()}
    return out


class Ring:
    """A trajectory buffer kept in numpy (time axis ``RING``) with its write counter."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(7)
        self.counter = 0
        self.data = self._map(lambda x: np.zeros((ROWS, RING, *x.shape), x.dtype), timestep())

    @staticmethod
    def _map(fn: Any, tree: Any, *rest: Any) -> Any:
        import jax

        return jax.tree.map(fn, tree, *rest)

    def add(self, n: int) -> None:
        new = steps(self.rng, n)
        at = (self.counter + np.arange(n)) % RING

        def put(ring: np.ndarray, part: np.ndarray) -> np.ndarray:
            ring[:, at] = part
            return ring

        self.data = self._map(put, self.data, new)
        self.counter += n

    @property
    def state(self) -> Any:
        c = self.counter
        return TrajectoryBufferState(
            experience=self._map(np.copy, self.data),
            current_index=np.int32(c % RING),
            is_full=np.bool_(c >= RING),
            write_counter=np.array([c >> 32, c & 0xFFFFFFFF], np.uint32),
        )


# ------------------------------------------------------------------------------- scenario
def s3_options(server: Any) -> dict[str, Any]:
    """The server as s3fs ``storage_options`` (what a zarr-python reader is given)."""
    storage = server.storage()
    return {
        "key": storage["access_key_id"],
        "secret": storage["secret_access_key"],
        "client_kwargs": {"endpoint_url": storage["endpoint"], "region_name": storage["region"]},
    }


def build_main(where: Any, storage: dict[str, Any] | None = None) -> None:
    """The main vault: buffer writes that wrap and overrun, restarts, tags."""
    ring = Ring()
    v = Vault.create(
        where, timestep(), rows=ROWS, chunk={"obs": [1, 4, 3]}, metadata={"run": "spec", "n": 1},
        done_leaf="done", truncated_leaf="cut", reward_leaf="reward", storage=storage,
    )  # fmt: skip
    ring.add(6)
    v.write(ring.state)
    ring.add(5)  # the ring wraps between two writes
    v.write(ring.state)
    v.tag("before-seam")
    ring.add(RING + 4)  # four unsaved timesteps overwritten: saved with a seam
    v.write(ring.state, on_overrun="save_surviving")
    v.append(steps(ring.rng, 5), continues=False)  # a restart: a seam that lost nothing
    v.append(steps(ring.rng, 7))
    v.tag("latest")
    v.close()


def build_codec(where: str, codec: str | None) -> None:
    """A small vault per codec: rows in two row blocks, the item axis cut in two chunks (so
    written in format 4)."""
    rng = np.random.default_rng(3)
    v = Vault.create(
        where, {"obs": np.zeros(3, np.float32), "flag": np.zeros((), np.uint8)}, rows=ROWS,
        codec=codec, chunk={"obs": [2, 3, 2]},
    )  # fmt: skip
    for n in (4, 5):
        v.append({"obs": rng.random((ROWS, n, 3), np.float32), "flag": rng.integers(0, 9, (3, n))
                  .astype(np.uint8)})  # fmt: skip
    v.close()


def build_many_episodes(where: str) -> None:
    """Over 8,192 episodes: the episode index gets a complete chunk (and place tags)."""
    v = Vault.create(
        where, {"done": np.zeros((), bool), "reward": np.zeros((), np.float32)}, rows=2,
        done_leaf="done", reward_leaf="reward",
    )  # fmt: skip
    for n in (4100, 60):
        v.append({"done": np.ones((2, n), bool), "reward": np.ones((2, n), np.float32)})
    v.close()


def build_dataset(where: str, names: list[str], storage: dict[str, Any] | None = None) -> None:
    rng = np.random.default_rng(5)
    example = {"obs": np.zeros(2, np.float32), "done": np.zeros((), bool)}
    ds = Dataset.create(where, example, rows=2, done_leaf="done", storage=storage)
    for i, name in enumerate(names):
        with ds.shard(name, rows=1 if i else None) as w:
            rows = 1 if i else 2
            for n in (3, 4):
                w.append({"obs": rng.random((rows, n, 2), np.float32),
                          "done": rng.random((rows, n)) < 0.3})  # fmt: skip


def build_flushed(where: str) -> None:
    """One timestep per chunk, so more place tags than a commit record keeps: the first
    append's go to the tag array, the second's stay in the record (format 5)."""
    v = Vault.create(where, {"x": np.zeros((), np.float32)}, rows=1, chunk={"x": [1, 1]})
    for t0, n in ((0, 300), (300, 50)):
        v.append({"x": np.arange(t0, t0 + n, dtype=np.float32)[None]})
    v.close()


def written_before_format_5(leaves: Any) -> int:
    """The format version rlvault chose before format 5: 4 where a leaf's chunks cut its
    item axes, else 3 (each of whose writers rlvault still is, appending to such a vault)."""
    return 4 if any(int(np.prod(leaf.item_chunks)) > 1 for leaf in leaves) else 3


class Scenario(NamedTuple):
    local: Path  # every local vault and dataset lies under it
    s3_prefix: str  # every S3 vault and dataset lies under it
    server: Any
    walked: dict[str, dict[str, bytes]]  # store label -> key -> bytes (S3: walked twice)
    vaults: dict[str, str]  # kind -> location (a vault, or "<dataset>#<shard>")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Scenario:
    local = tmp_path_factory.mktemp("spec")
    bucket = f"s3://{s3_server.bucket}/spec-{os.getpid()}"
    storage = s3_server.storage()
    with pytest.MonkeyPatch.context() as older:  # vaults of formats 3 and 4, as written then
        older.setattr(_create, "version_for", written_before_format_5)
        build_main(str(local / "main"))
        for codec in ("none", "gzip", "lz4", "zstd", "blosc"):
            build_codec(str(local / f"codec-{codec}"), None if codec == "none" else codec)
    build_many_episodes(str(local / "many"))
    build_flushed(str(local / "flushed"))
    build_dataset(str(local / "dataset"), ["alpha", "beta"])
    build_dataset(f"{bucket}/dataset", ["gamma"], storage)
    build_main(f"{bucket}/main", storage)
    walked = {"local": walk_local(local)}
    with Vault.open(f"{bucket}/main", mode="a", storage=storage) as w:  # fenced; the lease held
        w.append(steps(np.random.default_rng(1), 2))
        walked["s3 (writer open)"] = walk_s3(s3_server, bucket)
        w.append(steps(np.random.default_rng(2), 3))
    walked["s3 (closed)"] = walk_s3(s3_server, bucket)
    vaults = {
        "local main": str(local / "main"),
        **{f"local {c}": str(local / f"codec-{c}") for c in ("none", "gzip", "lz4", "zstd")},
        "local blosc": str(local / "codec-blosc"),
        "local many episodes": str(local / "many"),
        "local flushed": str(local / "flushed"),
        "local shard": f"{local / 'dataset'}#alpha",
        "local shard of one row": f"{local / 'dataset'}#beta",
        "s3 main": f"{bucket}/main",
        "s3 shard": f"{bucket}/dataset#gamma",
    }
    return Scenario(local, bucket, s3_server, walked, vaults)


def walk_local(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def walk_s3(server: Any, prefix: str) -> dict[str, bytes]:
    import s3fs

    options = s3_options(server)
    fs = s3fs.S3FileSystem(
        key=options["key"], secret=options["secret"], client_kwargs=options["client_kwargs"],
        skip_instance_cache=True, use_listings_cache=False,
    )  # fmt: skip
    base = prefix.removeprefix("s3://")
    keys = fs.find(base)
    return {key[len(base) + 1 :]: fs.cat_file(key) for key in keys}


# ------------------------------------------------------------------------------- schemas
def registry() -> Any:
    from referencing import Registry, Resource

    resources = []
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        resources.append((path.as_uri(), Resource.from_contents(json.loads(path.read_text()))))
    return Registry().with_resources(resources)


def validator(name: str) -> Any:
    from jsonschema import Draft202012Validator

    path = SCHEMAS / f"{name}.schema.json"
    schema = {"$ref": path.as_uri()}
    Draft202012Validator.check_schema(json.loads(path.read_text()))
    return Draft202012Validator(schema, registry=registry())


def schema_of(store: dict[str, bytes], key: str) -> str | None:
    """The schema of the object at ``key`` (None: a chunk, binary by the specification);
    AssertionError for a key the specification does not name."""
    vault_root, rest = vault_of(store, key)
    if vault_root is None:
        if rest == "zarr.json":
            return "dataset-root"
        if rest == "catalog":
            return "catalog"
        raise AssertionError(f"{key}: not an object of a dataset root")
    if rest == "zarr.json":
        return "vault-root"
    if rest == "commit/zarr.json" or re.fullmatch(r"history/\d+", rest):
        return "commit-group"
    if rest in ("history/zarr.json", "refs/zarr.json", "episodes/zarr.json"):
        return "group"
    if rest == "lock/zarr.json":
        return "lock-group"
    if rest == "lock/lease.json":
        return "lease"
    if rest == "trash/zarr.json":
        return "trash-group"
    if re.fullmatch(r"refs/[A-Za-z_][A-Za-z0-9._-]{0,99}", rest):
        return "tag"
    if rest in ("episodes/bounds/zarr.json", "episodes/returns/zarr.json"):
        return "index-array"
    if re.fullmatch(r"tags/(experience/.+|episodes/bounds|episodes/returns)/zarr\.json", rest):
        return "place-tag-array"
    if re.fullmatch(r"tags/.+/c/0/\d+", rest):
        return None  # a chunk of a place-tag array
    if re.fullmatch(r"(experience/.+|episodes/bounds|episodes/returns)/c(/\d+)+", rest):
        return None  # a data chunk
    if rest.startswith("experience/") and rest.endswith("zarr.json"):
        doc = json.loads(store[key])
        return "leaf-array" if doc.get("node_type") == "array" else "group"
    raise AssertionError(f"{key}: an object that the specification does not name")


def vault_of(store: dict[str, bytes], key: str) -> tuple[str | None, str]:
    """(the vault's root prefix, the key inside it), or (None, key) for a dataset root's own
    object. A vault root is a folder whose zarr.json holds the ``rlvault`` manifest."""
    parts = key.split("/")
    for i in range(len(parts)):
        prefix = "/".join(parts[:i])
        raw = store.get(f"{prefix}/zarr.json" if prefix else "zarr.json")
        if raw is None:
            continue
        attrs = json.loads(raw).get("attributes", {})
        if isinstance(attrs.get("rlvault"), dict):
            return prefix, "/".join(parts[i:])
        if "rlvault_dataset" in attrs and i == len(parts) - 1:
            return None, parts[-1]
    raise AssertionError(f"{key}: not inside a vault or a dataset root")


def catalog_parts(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """A catalog's header and its columns, its frame checked (docs/format.md, section 5.3)."""
    import google_crc32c

    body, trailer = raw[:-4], raw[-4:]
    assert google_crc32c.value(body) == int.from_bytes(trailer, "little")
    magic, size = struct.unpack_from("<8sQ", body)
    assert magic == b"RLVCAT01"
    header = json.loads(body[16 : 16 + size])
    return header, body[16 + size :]


def found_objects(scenario: Scenario) -> Iterator[tuple[str, str, Any]]:
    """(where, schema name, JSON object) for every JSON object of the scenario."""
    for label, store in scenario.walked.items():
        for key in sorted(store):
            name = schema_of(store, key)
            if name is None:
                continue
            if name == "catalog":
                header, columns = catalog_parts(store[key])
                yield f"{label}:{key} (header)", "catalog-header", header
                for i, text in enumerate(header["manifests"]):
                    yield f"{label}:{key} (manifests[{i}])", "vault-root", json.loads(text)
                root = json.loads(store[key[: -len("catalog")] + "zarr.json"])
                template = root["attributes"]["rlvault_dataset"]["template"]
                assert header["dataset"] == template["digest"]  # section 5.3: the dataset key
                tabled = sum(max(0, row[5]) for row in header["shards"] if row[6])
                assert len(columns) == 40 * tabled
                continue
            yield f"{label}:{key}", name, json.loads(store[key])


OBJECT_SCHEMAS = [
    "vault-root", "commit-group", "group", "lock-group", "lease", "trash-group", "tag",
    "leaf-array", "index-array", "place-tag-array", "dataset-root", "catalog-header",
]  # fmt: skip


def test_every_json_object_validates_against_its_schema(scenario: Scenario) -> None:
    from jsonschema import Draft202012Validator

    for path in sorted(SCHEMAS.glob("*.schema.json")):  # each a valid draft 2020-12 schema
        Draft202012Validator.check_schema(json.loads(path.read_text()))
    validators = {name: validator(name) for name in OBJECT_SCHEMAS}
    seen: dict[str, int] = dict.fromkeys(OBJECT_SCHEMAS, 0)
    failures = []
    for where, name, doc in found_objects(scenario):
        seen[name] += 1
        errors = sorted(validators[name].iter_errors(doc), key=lambda e: list(e.path))
        failures += [f"{where} ({name}): {e.message} at {list(e.path)}" for e in errors[:3]]
    assert not failures, "\n".join(failures[:20])
    assert all(seen.values()), f"schemas no object of the scenario used: {seen}"
    # the S3 vault was walked while its writer held the lease and the arrays were claimed
    live = scenario.walked["s3 (writer open)"]
    assert "main/lock/lease.json" in live
    assert "main/lock/lease.json" not in scenario.walked["s3 (closed)"]
    record = json.loads(live["main/commit/zarr.json"])["attributes"]["rlvault_commit"]
    assert "fence" in record
    assert [s["lost"] for s in record["gaps"]] == [4, 0]
    assert "rlvault_writer" in json.loads(live["main/experience/obs/zarr.json"])["attributes"]
    assert "main/tags/experience/obs/zarr.json" in scenario.walked["local"]  # format 3
    assert "flushed/tags/experience/x/zarr.json" in scenario.walked["local"]  # format 5
    many = json.loads(scenario.walked["local"]["many/commit/zarr.json"])["attributes"]
    assert list(many["rlvault_commit"]["tags"]) == ["episodes/bounds", "episodes/returns"]


def unknown_key_variants(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, Any]]:
    """``doc`` with one unknown key added to one of its objects, for every object in it
    (the user's metadata, which is any JSON object, left out)."""
    if isinstance(doc, dict):
        if path[-1:] != ("user_metadata",):
            changed = copy.deepcopy(doc)
            changed["unexpected_key"] = 1
            yield path, changed
            for key, value in doc.items():
                for where, variant in unknown_key_variants(value, (*path, key)):
                    yield where, {**doc, key: variant}
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            for where, variant in unknown_key_variants(value, (*path, i)):
                yield where, [*doc[:i], variant, *doc[i + 1 :]]


def test_every_schema_refuses_an_unknown_key_at_every_level(scenario: Scenario) -> None:
    validators = {name: validator(name) for name in OBJECT_SCHEMAS}
    largest: dict[str, tuple[int, Any]] = {}
    for _where, name, doc in found_objects(scenario):
        size = len(json.dumps(doc))
        if size > largest.get(name, (-1, None))[0]:
            largest[name] = (size, doc)
    accepted = []
    checked = 0
    for name, (_size, doc) in sorted(largest.items()):
        assert validators[name].is_valid(doc)
        for path, variant in unknown_key_variants(doc):
            checked += 1
            if validators[name].is_valid(variant):
                accepted.append(f"{name}: an unknown key at {list(path)}")
    assert not accepted, "\n".join(accepted)
    assert checked > 100


# ------------------------------------------------------------------------------- the reader
KINDS = [
    "local main", "local none", "local gzip", "local lz4", "local zstd", "local blosc",
    "local many episodes", "local flushed", "local shard", "local shard of one row", "s3 main",
    "s3 shard",
]  # fmt: skip


def opened(scenario: Scenario, kind: str) -> tuple[Vault, spec_reader.SpecVault]:
    """rlvault's vault and the spec reader's, for ``kind`` of the scenario."""
    location = scenario.vaults[kind]
    s3 = location.startswith("s3://")
    storage = scenario.server.storage() if s3 else None
    options = s3_options(scenario.server) if s3 else None
    if "#" in location:
        root, shard = location.split("#")
        ours = Dataset.open(root, storage=storage, write_catalog=False).vault(shard)
        dataset = spec_reader.open_dataset(root, options)
        assert shard in dataset.shards
        theirs = dataset.shard(shard)
    else:
        ours = Vault.open(location, storage=storage)
        theirs = spec_reader.open_vault(location, options)
    return ours, theirs


def assert_same(ours: Vault, theirs: spec_reader.SpecVault) -> None:
    assert theirs.commit_id == ours.commit_id
    assert theirs.length == ours.committed_length
    assert theirs.seams == ours.gaps
    data = theirs.read()
    assert list(data) == ours.leaf_names
    expected = ours.read_numpy(leaves=ours.leaf_names)
    for name, values in expected.items():
        assert data[name].dtype == values.dtype, name
        np.testing.assert_array_equal(data[name], values, err_msg=name)
    if ours.has_episodes:
        for include_open in (False, True):
            table = ours.episodes(include_open=include_open)
            got = theirs.episodes(include_open=include_open)
            for column, values in got.items():
                np.testing.assert_array_equal(values, getattr(table, column), err_msg=column)
    assert theirs.fingerprint() == ours.fingerprint()


@pytest.mark.parametrize("kind", KINDS)
def test_the_spec_reader_reads_what_rlvault_reads(scenario: Scenario, kind: str) -> None:
    ours, theirs = opened(scenario, kind)
    assert_same(ours, theirs)
    assert theirs.tags() == ours.tags()
    location = scenario.vaults[kind]
    storage = scenario.server.storage() if location.startswith("s3://") else None
    if "#" in location:
        return  # a shard's commits are a vault's: pinned in the vault kinds
    if storage is None:  # every commit by number and by id, every tag
        numbers = list(range(theirs.commit["seq"]))
        pins: list[int | str] = [*numbers, *ours.tags()]
        pins += [Vault.open(location, at=seq).commit_id for seq in numbers]
    else:  # S3 (a round trip per request): one commit by id, one by tag
        pins = [Vault.open(location, at=2, storage=storage).commit_id, "before-seam"]
    for pin in pins:
        assert_same(Vault.open(location, at=pin, storage=storage), theirs.at(pin))


def test_the_scenario_has_every_kind_of_vault(scenario: Scenario) -> None:
    main = Vault.open(scenario.vaults["local main"])
    assert [g["lost"] for g in main.gaps] == [4, 0]  # an overrun and a restart
    assert set(main.tags()) == {"before-seam", "latest"}
    table = main.episodes(include_open=True)
    assert table.truncated.any()
    assert (~table.start_known).any()
    assert (~table.complete).any()
    names = main.leaf_names
    assert {"odd/%-", "odd/%2Ehidden", "odd/%7Aarr.json", "extra/right/0"} <= set(names)
    assert len(Vault.open(scenario.vaults["local many episodes"]).episodes()) > 8192
    # every version written: 3 and 4 as before format 5 (the codec vaults cut obs's items), 5
    assert main.manifest.format_version == 3
    assert Vault.open(scenario.vaults["local zstd"]).manifest.format_version == 4
    s3_main = Vault.open(scenario.vaults["s3 main"], storage=scenario.server.storage())
    assert s3_main.manifest.format_version == 5
    assert s3_main.snapshot.commit.tags  # place tags that only the commit record holds
    flushed = Vault.open(scenario.vaults["local flushed"])
    assert flushed.manifest.format_version == 5
    [(key, kept)] = flushed.snapshot.commit.tags.items()
    assert (key, kept.start, len(kept.values)) == ("experience/x", 300, 50)
    assert (scenario.local / "flushed" / "tags" / "experience" / "x" / "c" / "0" / "0").exists()
    assert set(scenario.vaults) == set(KINDS)


# ------------------------------------------------------------------------------- refusals
def copy_of(scenario: Scenario, tmp_path: Path, name: str = "main") -> Path:
    target = tmp_path / name
    shutil.copytree(scenario.local / name, target)
    return target


def edit_json(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_the_spec_reader_refuses_what_a_reader_must_refuse(
    scenario: Scenario, tmp_path: Path
) -> None:
    def both_refuse(where: Path, error: type[Exception], match: str) -> None:
        with pytest.raises(error, match=match):
            spec_reader.open_vault(str(where)).read()
        with pytest.raises(vault.VaultError):
            Vault.open(str(where)).read_numpy()

    # a newer format version
    v = copy_of(scenario, tmp_path / "newer")
    newer = spec_reader.FORMAT + 1
    edit_json(v / "zarr.json", lambda d: d["attributes"]["rlvault"].update(format_version=newer))
    both_refuse(v, spec_reader.VersionError, f"format version {newer}")
    # a manifest edited without its digest
    v = copy_of(scenario, tmp_path / "manifest")
    edit_json(v / "zarr.json", lambda d: d["attributes"]["rlvault"].update(rows=ROWS))
    edit_json(v / "zarr.json", lambda d: d["attributes"]["rlvault"]["user_metadata"].update(n=2))
    both_refuse(v, spec_reader.SpecError, "does not match its digest")
    # a commit record edited without its digest
    v = copy_of(scenario, tmp_path / "commit")
    edit_json(
        v / "commit/zarr.json",
        lambda d: d["attributes"]["rlvault_commit"].update(committed_length=3),
    )
    both_refuse(v, spec_reader.SpecError, "does not match its digest")
    # a complete chunk copied over another place: its checksum passes, its place tag does not
    v = copy_of(scenario, tmp_path / "moved")
    shutil.copy(v / "experience/obs/c/0/0/0", v / "experience/obs/c/0/1/0")
    both_refuse(v, spec_reader.SpecError, "not the chunk written there")
    # a chunk missing inside the committed range
    v = copy_of(scenario, tmp_path / "missing")
    (v / "experience/reward/c/0/0").unlink()
    both_refuse(v, spec_reader.SpecError, "is missing")
    # the partly filled last chunk holding other data than committed
    v = copy_of(scenario, tmp_path / "edge")
    length = spec_reader.open_vault(str(v)).length
    assert length % 4  # obs has 4 timesteps per chunk: the last one is partly filled
    shutil.copy(v / "experience/obs/c/0/1/0", v / f"experience/obs/c/0/{length // 4}/0")
    both_refuse(v, spec_reader.SpecError, "differ from the ones the commit recorded")
    # array metadata that departs from the manifest
    v = copy_of(scenario, tmp_path / "metadata")
    edit_json(v / "experience/obs/zarr.json", lambda d: d.update(data_type="float64"))
    both_refuse(v, spec_reader.SpecError, "departs from the manifest")
    # a pin to a commit of another vault at this location
    with pytest.raises(spec_reader.SpecError, match="is not this vault's"):
        spec_reader.open_vault(str(scenario.local / "main")).at("2-000000000000")


def test_the_spec_reader_knows_nothing_of_rlvault() -> None:
    """It imports neither vault nor buffers (only zarr-python, numpy and the standard
    library): what it knows of the format it knows from the specification."""
    import ast

    imported: set[str] = set()
    for module in ("spec_reader.py", "_spec_layout.py"):  # the reader and its layout helpers
        tree = ast.parse((ROOT / "tools" / module).read_text())
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    tops = {name.split(".")[0] for name in imported}
    assert tops <= {"__future__", "_spec_layout", "argparse", "asyncio", "collections", "hashlib",
                    "json", "numpy", "os", "re", "sys", "typing", "zarr", "zlib"}, tops  # fmt: skip


@pytest.mark.parametrize(("name", "version"), [("main", 2), ("codec-zstd", 1)])
def test_the_spec_reader_reads_older_versions_as_rlvault_does(
    scenario: Scenario, tmp_path: Path, name: str, version: int
) -> None:
    """A vault of format 1 or 2 has no place tags or edges to check and needs no digest
    (section 9): both readers read it, a chunk moved to another place included."""
    v = copy_of(scenario, tmp_path, name)

    def older(doc: dict[str, Any]) -> None:
        manifest = doc["attributes"]["rlvault"]
        manifest["format_version"] = version
        del manifest["digest"]  # (written without one)

    edit_json(v / "zarr.json", older)
    shutil.copy(v / "experience" / "obs" / "c" / "0" / "0" / "0", v / "experience/obs/c/0/1/0")
    ours, theirs = Vault.open(str(v)), spec_reader.open_vault(str(v))
    assert theirs.version == version
    assert_same(ours, theirs)  # the moved chunk is read as data by both: no place tags
    leaf = next(x for x in theirs.manifest["leaves"] if x["name"] == "obs")
    rows, step, items = leaf["chunk"]
    obs = theirs.read()["obs"]
    np.testing.assert_array_equal(obs[:rows, step : 2 * step, :items], obs[:rows, :step, :items])


def test_the_spec_reader_command_prints_a_pinned_commit(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    location = scenario.vaults["local main"]
    assert spec_reader.main([location, "--at", "before-seam", "--episodes"]) == 0
    shown = json.loads(capsys.readouterr().out)
    pinned = Vault.open(location, at="before-seam")
    assert shown["commit"] == pinned.commit_id
    assert shown["committed_length"] == pinned.committed_length == 11
    assert shown["fingerprint"] == pinned.fingerprint()
    assert shown["leaves"]["obs"] == ["float32", [ROWS, 11, 3]]
    assert shown["episodes"]["start"] == pinned.episodes(include_open=True).start.tolist()
