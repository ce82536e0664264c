"""A reader of rlvault vaults and datasets written from the format specification alone.

It knows ``docs/format.md`` and nothing else of rlvault: zarr-python (arrays and the store's raw
keys), ``json``, ``hashlib``, ``zlib`` and numpy; it never imports ``vault`` or ``buffers``. The
tests compare it with rlvault on vaults of every kind: the proof that the specification is
complete (what it needed and the specification did not say was added to the specification).

It refuses what a reader must refuse (section 10 of the specification), reads every leaf up to
the committed length, the episode table and any commit by number, id or tag, and computes a
commit's content fingerprint. Usage::

    python tools/spec_reader.py PATH_OR_URL [--at PIN] [--episodes]

It prints JSON: for a vault its commit, committed length, seams, leaves (dtype and shape read)
and fingerprint (``--episodes``: the episode table, open episodes included); for a dataset
root (§5) the same for each of its shards, with their count and timesteps. ``--at`` pins a
vault's commit by number, id or tag, and a dataset by a tag its shards carry (§4.7: each shard
that has it, at its tagged commit). Exit status: 0 read; 1 refused, the stored objects break
the specification (one line on stderr); 2 a bad argument: no vault or dataset at the location,
a pin that names no commit (one line on stderr, after the usage).

``s3://bucket/prefix`` takes the endpoint, region and keys from the AWS environment variables,
or s3fs ``storage_options`` given to :func:`open_vault`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import sys
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import zarr
import zarr.api.asynchronous
from _spec_layout import (
    build_tree,
    dimension_names,
    grids,
    index_metadata,
    leaf_names,
    normal_codecs,
)
from zarr.abc.store import SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

FORMAT = 5  # the newest format version this reader knows (§9)
DATASET_FORMAT = 1
TAG_CHUNK = 1024  # tags per chunk of a tag array (§4.5)
_COMMIT_ID = re.compile(r"(\d+)(?:-([0-9a-f]{4,64}))?")  # (fullmatch: "$" allows "\n")
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,99}")


def is_tag_name(name: str) -> bool:
    """§4.7: the name pattern; in any letter case, not zarr.json, not ending in .__lock."""
    folded = name.lower()
    return (
        bool(_TAG_NAME.fullmatch(name)) and folded != "zarr.json" and not folded.endswith(".__lock")
    )


_SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class SpecError(Exception):
    """The stored objects break the specification: a reader must refuse them (§10)."""


class VersionError(SpecError):
    """A format version this reader does not know (newer)."""


class PinError(SpecError):
    """A pin that names no commit this vault can serve (§4.7): no such number, tag or id."""


# ----------------------------------------------------------------------------- the store
class Store:
    """Raw keys of a location through a zarr-python store (local directory or s3fs)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url, self.prefix = url.rstrip("/"), ""
        if url.startswith("s3://"):
            options = storage_options if storage_options is not None else _aws_options()
            self.zarr = zarr.storage.FsspecStore.from_url(
                self.url, storage_options=options, read_only=True
            )
        else:
            path = url[len("file://") :] if url.startswith("file://") else url
            self.zarr = zarr.storage.LocalStore(path, read_only=True)

    def child(self, name: str) -> Store:
        """The location ``name`` under this one (the same store, a longer prefix)."""
        out = Store.__new__(Store)
        out.url, out.zarr = f"{self.url}/{name.strip('/')}", self.zarr
        out.prefix = f"{self.prefix}{name.strip('/')}/"
        return out

    async def fetch(self, key: str, suffix: int | None = None) -> bytes | None:
        """The value of ``key`` (its last ``suffix`` bytes only, when given); None if absent."""
        request = None if suffix is None else SuffixByteRequest(suffix)
        got = await self.zarr.get(
            self.prefix + key, prototype=default_buffer_prototype(), byte_range=request
        )
        return None if got is None else got.to_bytes()

    async def fetch_many(self, keys: Sequence[str], suffix: int | None = None) -> list[Any]:
        return list(await asyncio.gather(*(self.fetch(k, suffix) for k in keys)))

    def get_many(self, keys: Sequence[str], suffix: int | None = None) -> list[bytes | None]:
        """:meth:`fetch` of every key, concurrently (one round trip)."""
        return sync(self.fetch_many(keys, suffix)) if keys else []

    def get(self, key: str) -> bytes | None:
        return self.get_many([key])[0]

    def listing(self, prefix: str, one_level: bool = False) -> list[str]:
        """The keys under ``prefix`` (``one_level``: the names of its children)."""

        async def every() -> list[str]:
            found = self.zarr.list_dir if one_level else self.zarr.list_prefix
            return [k async for k in found(self.prefix + prefix)]

        keys = sync(every())
        return sorted(keys if one_level else [k[len(self.prefix) :] for k in keys])

    async def read_array(self, key: str, selection: Any) -> np.ndarray:
        """``selection`` of the Zarr v3 array ``key``, decoded by zarr-python."""
        array = await zarr.api.asynchronous.open_array(
            store=self.zarr, path=self.prefix + key, mode="r", zarr_format=3
        )
        return np.asarray(await array.getitem(selection))

    def gather(self, *work: Any) -> list[Any]:
        """Run coroutines concurrently; their results in order."""

        async def every() -> list[Any]:
            return list(await asyncio.gather(*work))

        return sync(every())


def _aws_options() -> dict[str, Any]:
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    kwargs = {"region_name": region, **({"endpoint_url": endpoint} if endpoint else {})}
    options: dict[str, Any] = {"client_kwargs": kwargs}
    if env.get("AWS_ACCESS_KEY_ID"):
        options.update(key=env["AWS_ACCESS_KEY_ID"], secret=env.get("AWS_SECRET_ACCESS_KEY"))
    return options


# ------------------------------------------------------------------------ JSON and digests
def parse_object(raw: bytes | None, where: str) -> dict[str, Any]:
    if raw is None:
        raise SpecError(f"{where} is missing")
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise SpecError(f"{where} is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise SpecError(f"{where} is not a JSON object")
    return doc


def canonical_digest(doc: dict[str, Any]) -> str:
    """§6.2: SHA-256 of the canonical JSON of every key but ``digest``, 32 hex digits."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


def check_digest(doc: dict[str, Any], version: int, where: str) -> None:
    """§6.2: a digest that is there must match; formats 3 and later require one."""
    if "digest" not in doc and version < 3:
        return  # §9: versions 1 and 2 were written without
    if doc.get("digest") != canonical_digest(doc):
        raise SpecError(f"{where}: the content does not match its digest")


def attributes(group: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    attrs = group.get("attributes")
    value = attrs.get(name) if isinstance(attrs, dict) else None
    if not isinstance(value, dict):
        raise SpecError(f"{where}: no {name!r} attributes")
    return value


def check_manifest(doc: dict[str, Any], where: str) -> dict[str, Any]:
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SpecError(f"{where}: format_version {version!r} is not a version")
    if version > FORMAT:
        raise VersionError(f"{where}: format version {version}; this reader knows 1..{FORMAT}")
    check_digest(doc, version, f"{where} (manifest)")
    names = leaf_names(doc["structure"])
    if [leaf["name"] for leaf in doc["leaves"]] != names:
        raise SpecError(f"{where}: the leaves do not match the structure")
    return doc


# ----------------------------------------------------------------------------- a vault
class SpecVault:
    """A vault at one commit, read as the specification says."""

    def __init__(self, store: Store, manifest: Any = None, commit: Any = None) -> None:
        self.store = store
        where = store.url
        raw_commit = None
        if manifest is None:
            raw_root, raw_commit = store.get_many(["zarr.json", "commit/zarr.json"])
            root = parse_object(raw_root, f"{where}/zarr.json")
            manifest = check_manifest(attributes(root, "rlvault", where), where)
        self.manifest = manifest
        self.version = int(manifest["format_version"])
        if commit is None:
            raw_commit = raw_commit or store.get("commit/zarr.json")
            commit = self._record(raw_commit, "commit/zarr.json")
        self.commit = commit
        self.grids = grids(manifest)
        self._tails: dict[str, bytes | None] = {}

    # -- records
    def _record(self, raw: bytes | None, key: str) -> dict[str, Any]:
        where = f"{self.store.url}/{key}"
        record = attributes(parse_object(raw, where), "rlvault_commit", where)
        length = record.get("committed_length")
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise SpecError(f"{where}: committed_length {length!r}")
        check_digest(record, self.version, f"{where} (commit record)")
        return record

    @property
    def length(self) -> int:
        return int(self.commit["committed_length"])

    @property
    def rows(self) -> int:
        return int(self.manifest["rows"])

    @property
    def episode_count(self) -> int:
        episodes = self.commit.get("episodes") if self.manifest.get("episodes") else None
        return 0 if episodes is None else int(episodes["count"])

    @property
    def commit_id(self) -> str:
        seq = int(self.commit.get("seq", 0))
        uid = self.commit.get("uid")
        return f"{seq}-{uid}" if uid else str(seq)

    @property
    def seams(self) -> list[dict[str, int]]:
        return [{"at": s["at"], "lost": s["lost"]} for s in self.commit.get("gaps", [])]

    # -- pins
    def tags(self) -> dict[str, str]:
        out = {}
        for key in self.store.listing("refs/"):
            name = key[len("refs/") :]
            if is_tag_name(name):
                out[name] = self._tag(name)
        return out

    def _tag(self, name: str) -> str:
        doc = parse_object(self.store.get(f"refs/{name}"), f"{self.store.url}/refs/{name}")
        return str(doc["commit"])

    def has_tag(self, name: str) -> bool:
        """Whether ``refs/<name>`` is there."""
        return is_tag_name(name) and self.store.get(f"refs/{name}") is not None

    def at(self, pin: int | str) -> SpecVault:
        """This vault at the commit ``pin`` names: its number, its id, or a tag."""
        if isinstance(pin, int):
            seq, uid = pin, None
        else:
            found = _COMMIT_ID.fullmatch(pin)
            if found is None:
                if not is_tag_name(pin):
                    raise PinError(
                        f"{self.store.url}: {pin!r} is not a commit number, id or tag name"
                    )
                if not self.has_tag(pin):
                    raise PinError(f"{self.store.url}: no tag {pin!r}")
                found = _COMMIT_ID.fullmatch(self._tag(pin))
            if found is None:
                raise SpecError(f"{self.store.url}: tag {pin!r} does not name a commit id")
            seq, uid = int(found.group(1)), found.group(2)
        latest = int(self.commit.get("seq", 0))
        if seq == latest:
            record = self.commit
        elif seq > latest or seq < 0:
            raise PinError(f"{self.store.url}: no commit {seq} (latest {latest})")
        else:
            raw = self.store.get(f"history/{seq}")
            if raw is None:  # §4.7: the commit cannot be served
                raise PinError(
                    f"{self.store.url}: commit {seq} cannot be served (no history/{seq}; "
                    f"latest {latest})"
                )
            record = self._record(raw, f"history/{seq}")
            if int(record.get("seq", 0)) != seq:
                raise SpecError(f"{self.store.url}: history/{seq} holds another commit")
        if uid is not None and record.get("uid") != uid:
            raise PinError(f"{self.store.url}: commit {pin!r} is not this vault's")
        if record["committed_length"] > self.length:
            raise SpecError(f"{self.store.url}: a pinned commit longer than the latest")
        return SpecVault(self.store, self.manifest, record)

    # -- array metadata
    def _expected(self, key: str) -> dict[str, Any]:
        if key.startswith("episodes/"):
            return index_metadata(key.split("/")[1])
        leaf = next(x for x in self.manifest["leaves"] if f"experience/{x['name']}" == key)
        dtype = np.dtype(leaf["dtype"])
        return {
            "data_type": dtype.name,
            "chunk_shape": list(leaf["chunk"]),
            "codecs": normal_codecs(leaf["codecs"], dtype.itemsize),
            "fill_value": False if dtype == np.bool_ else 0,
            "dimension_names": dimension_names(leaf["name"], len(leaf["shape"])),
            "item": list(leaf["shape"]),
        }

    def _check_metadata(self, key: str, raw: bytes | None, length: int) -> dict[str, Any]:
        """Array ``key``'s ``zarr.json`` checked against the manifest (§4.2, §7 step 3)."""
        where = f"{self.store.url}/{key}/zarr.json"
        meta = parse_object(raw, where)
        want = self._expected(key)
        grid = meta.get("chunk_grid", {})
        problems = []
        if meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
            problems.append("not a Zarr v3 array")
        if meta.get("data_type") != want["data_type"]:
            problems.append(f"data_type {meta.get('data_type')!r}")
        chunk = grid.get("configuration", {}).get("chunk_shape")
        if grid.get("name") != "regular" or chunk != want["chunk_shape"]:
            problems.append(f"chunk grid {grid!r}")
        if meta.get("codecs") != want["codecs"]:
            problems.append(f"codecs {meta.get('codecs')!r}")
        if meta.get("fill_value") != want["fill_value"]:
            problems.append(f"fill_value {meta.get('fill_value')!r}")
        encoding = meta.get("chunk_key_encoding", {})
        separator = encoding.get("configuration", {}).get("separator", "/")
        if encoding.get("name") != "default" or separator != "/":
            problems.append(f"chunk_key_encoding {encoding!r}")
        names = meta.get("dimension_names")
        if self.manifest.get("dimension_names") is True and names != want["dimension_names"]:
            problems.append(f"dimension_names {meta.get('dimension_names')!r}")
        shape = meta.get("shape", [])
        axis = 0 if key.startswith("episodes/") else 1
        lead = [] if axis == 0 else [self.rows]
        if shape[:axis] != lead or shape[axis + 1 :] != want["item"] or shape[axis] < length:
            problems.append(f"shape {shape} (committed {length})")
        if problems:
            raise SpecError(f"{where} departs from the manifest: " + "; ".join(problems))
        return meta

    # -- integrity (§6.1, §7)
    def _chunk_keys(self, key: str, length: int) -> list[tuple]:
        """(key, row block, time chunk, item chunk) of every chunk holding ``[0, length)``."""
        g, ks = self.grids[key], range(-(-length // self.grids[key].step))
        return [
            (g.chunk(b, k, i), b, k, i) for b in range(g.blocks) for k in ks for i in range(g.count)
        ]

    def _load(self, lengths: dict[str, int]) -> None:
        """Check arrays ``{key: committed length}`` before reading them: their metadata
        against the manifest, every chunk of the committed range present, every complete one
        the chunk written at its place (§6.1). Three rounds of requests for all of them."""
        keys = list(lengths)
        raws = self.store.get_many([f"{key}/zarr.json" for key in keys])
        for key, raw in zip(keys, raws, strict=True):
            self._check_metadata(key, raw, lengths[key])
        chunks = {key: self._chunk_keys(key, lengths[key]) for key in keys}
        tagged = [k for k in keys if self.version >= 3 and lengths[k] >= self.grids[k].step]
        flat = [c[0] for key in keys for c in chunks[key]]
        tails, *tags = self.store.gather(
            self.store.fetch_many(flat, suffix=4),
            *(self._tags(key, lengths[key] // self.grids[key].step) for key in tagged),
        )
        self._tails = dict(zip(flat, tails, strict=True))
        strict = self.manifest.get("fill_chunks_stored") is True
        missing = [c for c in flat if self._tails[c] is None]
        if missing and strict:
            raise SpecError(f"{self.store.url}: chunk {missing[0]} is missing")
        for key, values in zip(tagged, tags, strict=True):
            grid = self.grids[key]
            complete = lengths[key] // grid.step
            for chunk, b, k, i in chunks[key]:  # tag of (b, k, i) at [b, k * bound + i]
                tail, tag = self._tails[chunk], values[b, k * grid.bound + i : (k + 1) * grid.bound]
                stored = None if tail is None else int.from_bytes(tail, "little")
                if i < grid.bound and k < complete and stored not in (None, int(tag[0])):
                    raise SpecError(f"{self.store.url}: {chunk} is not the chunk written there")

    async def _tags(self, key: str, complete: int) -> np.ndarray:
        """The place tags of the first ``complete`` time chunks of array ``key``: in its tag
        array, but those the commit record keeps (format 5, §4.5)."""
        bound, blocks = self.grids[key].bound, self.grids[key].blocks
        kept = (self.commit.get("tags") or {}).get(key) if self.version >= 5 else None
        if kept is not None and len(kept["tags"]) != blocks * (complete - kept["from"]) * bound:
            raise SpecError(f"{self.store.url}: the record keeps a wrong count of {key}'s tags")
        n = (complete if kept is None else min(kept["from"], complete)) * bound
        try:  # none there until the first tags the record does not keep
            values = await self.store.read_array(f"tags/{key}", (slice(None), slice(0, n)))
        except Exception as err:  # absent or unreadable
            if n:
                raise SpecError(f"{self.store.url}: tags/{key} cannot be read ({err})") from None
            values = np.zeros((blocks, 0), "<u4")
        if kept is not None and complete > kept["from"]:
            held = np.asarray(kept["tags"], "<u4").reshape(blocks, -1)
            values = np.concatenate([values, held[:, : (complete - kept["from"]) * bound]], 1)
        if values.shape != (blocks, complete * bound):
            raise SpecError(f"{self.store.url}: tags/{key} holds {values.shape} tags")
        return values

    def _check_edge(self, key: str, length: int, data: np.ndarray) -> None:
        """The committed part of the partly filled last chunk is what the commit recorded
        (§4.3 edges). ``data``: the array's committed values ``[rows, length, ...]`` (the
        episode index: ``[1, count, ...]``)."""
        edge = (self.commit.get("edges") or {}).get(key)
        if self.version < 3 or edge is None:
            return
        grid = self.grids[key]
        k = edge["from"] // grid.step
        if edge.get("tail") and grid.bound == grid.count:  # format 3, items cut: crc only
            stored = [self._tails.get(c) for c in grid.bound_keys(k)]
            if [None if t is None else int.from_bytes(t, "little") for t in stored] == edge["tail"]:
                return  # the chunk is still the one stored at this commit
        region = data[:, edge["from"] : length]
        little = region.astype(region.dtype.newbyteorder("<"))
        got = [zlib.crc32(np.ascontiguousarray(row).tobytes()) for row in little]
        if got != [int(c) for c in edge["crc"]]:
            raise SpecError(
                f"{self.store.url}: {key}: the committed timesteps from {edge['from']} differ "
                "from the ones the commit recorded"
            )

    # -- reading
    def read(self, tree: bool = False) -> Any:
        """Every leaf's committed data ``[rows, committed length, ...]``: a dict by leaf path,
        or (``tree``) the structure's containers."""
        length = self.length
        names = [leaf["name"] for leaf in self.manifest["leaves"]]
        keys = [f"experience/{name}" for name in names]
        self._load(dict.fromkeys(keys, length))
        part = (slice(None), slice(0, length))
        data = self.store.gather(*(self.store.read_array(key, part) for key in keys))
        for key, values in zip(keys, data, strict=True):
            self._check_edge(key, length, values)
        if tree:
            return build_tree(self.manifest["structure"], data)
        return dict(zip(names, data, strict=True))

    def episodes(self, include_open: bool = False) -> dict[str, np.ndarray]:
        """The episode table (§4.4): columns ``row, start, length, returns, truncated,
        complete, start_known``."""
        cfg = self.manifest.get("episodes")
        if cfg is None:
            raise SpecError(f"{self.store.url} keeps no episode index")
        count = self.episode_count
        bounds = np.zeros((0, 4), np.int64)
        returns = np.zeros(0, np.float64)
        if count:
            keys = ["episodes/bounds", "episodes/returns"]
            self._load(dict.fromkeys(keys, count))
            bounds, returns = self.store.gather(
                *(self.store.read_array(key, slice(0, count)) for key in keys)
            )
            self._check_edge(keys[0], count, bounds[None])
            self._check_edge(keys[1], count, returns[None])
        complete = np.ones(count, bool)
        if include_open:
            state = self.commit["episodes"]["open"]
            starts = np.asarray(state["start"], np.int64)
            rows = np.flatnonzero(starts < self.length)
            opened = np.stack(
                [rows, starts[rows], self.length - starts[rows],
                 np.asarray(state["flags"], np.int64)[rows]], axis=1,
            ).reshape(-1, 4)  # fmt: skip
            bounds = np.concatenate([bounds, opened.astype(np.int64)])
            returns = np.concatenate([returns, np.asarray(state["return"], np.float64)[rows]])
            complete = np.concatenate([complete, np.zeros(len(rows), bool)])
        flags = bounds[:, 3]
        return {
            "row": bounds[:, 0],
            "start": bounds[:, 1],
            "length": bounds[:, 2],
            "returns": returns if cfg.get("reward") else np.full(len(bounds), np.nan),
            "truncated": (flags & 1) != 0,
            "complete": complete,
            "start_known": (flags & 2) == 0,
        }

    # -- fingerprint (§6.4)
    def fingerprint(self) -> str:
        """The content fingerprint of this commit (§6.4)."""
        manifest = self.manifest
        head = {
            "rows": manifest["rows"],
            "structure": manifest["structure"],
            "leaves": [
                [x["name"], np.dtype(x["dtype"]).name, x["shape"], x["chunk"], x["codecs"]]
                for x in manifest["leaves"]
            ],
            "episodes": manifest.get("episodes"),
            "committed_length": self.length,
            "episode_count": self.episode_count,
            "seams": [[s["at"], s["lost"]] for s in self.seams],
        }
        plans = []
        for key, grid in self.grids.items():
            index = key.startswith("episodes/")
            length = self.episode_count if index else self.length
            complete = length // grid.step
            chunks = [c for k in range(complete) for c in grid.bound_keys(k)]
            e0 = complete * grid.step
            edge = None
            if length % grid.step:
                edge = (slice(e0, length),) if index else (slice(None), slice(e0, length))
            plans.append((key, chunks, edge))
        work = [self.store.fetch_many(chunks, suffix=4) for _, chunks, _ in plans]
        work += [self.store.read_array(key, edge) for key, _, edge in plans if edge is not None]
        results = self.store.gather(*work)
        tails, edges = results[: len(plans)], iter(results[len(plans) :])
        digest = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
        for (key, _chunks, edge), stored in zip(plans, tails, strict=True):
            if any(t is None for t in stored):
                raise SpecError(f"{self.store.url}: {key}: a complete chunk is missing")
            digest.update(key.encode())
            digest.update(b"".join(stored))
            if edge is not None:
                digest.update(np.ascontiguousarray(next(edges)).tobytes())
        return f"sha256:{digest.hexdigest()}"


def open_vault(url: str | Store, storage_options: dict[str, Any] | None = None) -> SpecVault:
    """The vault at ``url`` at its latest commit (§7)."""
    store = url if isinstance(url, Store) else Store(url, storage_options)
    return SpecVault(store)


# ----------------------------------------------------------------------------- datasets
class SpecDataset:
    """A dataset root (§5): its template and its shards."""

    def __init__(self, store: Store) -> None:
        self.store = store
        root = parse_object(store.get("zarr.json"), f"{store.url}/zarr.json")
        doc = attributes(root, "rlvault_dataset", store.url)
        if type(doc.get("format")) is not int or doc.get("format") != DATASET_FORMAT:
            raise VersionError(f"{store.url}: dataset format {doc.get('format')!r}")
        self.template = check_manifest(doc["template"], f"{store.url} (template)")

    @property
    def shards(self) -> list[str]:
        """The shards: folders under ``shards/`` whose root ``zarr.json`` is there."""
        names = [n.rstrip("/") for n in self.store.listing("shards/", one_level=True)]
        names = [n for n in names if _SHARD_NAME.fullmatch(n)]
        present = self.store.get_many([f"shards/{n}/zarr.json" for n in names])
        return [n for n, raw in zip(names, present, strict=True) if raw is not None]

    def shard(self, name: str) -> SpecVault:
        """Shard ``name``, refused when its structure departs from the template (§5.2)."""
        vault = SpecVault(self.store.child(f"shards/{name}"))

        def shape(m: dict[str, Any]) -> Any:
            leaves = [(x["name"], x["shape"], x["dtype"]) for x in m["leaves"]]
            return m["structure"], m.get("episodes"), leaves

        if shape(vault.manifest) != shape(self.template):
            raise SpecError(f"{self.store.url}: shard {name!r} differs from the template")
        return vault


def open_dataset(url: str, storage_options: dict[str, Any] | None = None) -> SpecDataset:
    return SpecDataset(Store(url, storage_options))


# ----------------------------------------------------------------------------- command
def summary(vault: SpecVault, episodes: bool = False) -> dict[str, Any]:
    """What the command prints of one vault (or shard) at its commit."""
    data = vault.read()
    out: dict[str, Any] = {"commit": vault.commit_id, "committed_length": vault.length}
    out["seams"] = vault.seams
    out["leaves"] = {k: [str(v.dtype), list(v.shape)] for k, v in data.items()}
    out["fingerprint"] = vault.fingerprint()
    if episodes:
        out["episodes"] = {k: v.tolist() for k, v in vault.episodes(True).items()}
    return out


def dataset_summary(
    dataset: SpecDataset, at: str | None = None, episodes: bool = False
) -> dict[str, Any]:
    """What the command prints of a dataset root: each shard's :func:`summary`, at the tag
    ``at`` (only the shards that have it, each at its tagged commit; §4.7)."""
    shards = {name: dataset.shard(name) for name in dataset.shards}
    if at is not None:
        if _COMMIT_ID.fullmatch(at) or not is_tag_name(at):
            raise PinError(
                f"{dataset.store.url}: a dataset is pinned by a tag name (commit numbers and "
                f"ids are each shard's own), got {at!r}"
            )
        shards = {name: v.at(at) for name, v in shards.items() if v.has_tag(at)}
        if not shards:
            raise PinError(f"{dataset.store.url}: no shard has the tag {at!r}")
    out: dict[str, Any] = {"dataset": dataset.store.url, "format": DATASET_FORMAT}
    if at is not None:
        out["tag"] = at
    out["timesteps"] = sum(v.rows * v.length for v in shards.values())
    out["shards"] = {name: summary(v, episodes) for name, v in shards.items()}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The command: 0 read, 1 refused (the specification is broken), 2 a bad argument."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "location", help="a vault or a dataset root: a folder, file://PATH or s3://bucket/prefix"
    )
    parser.add_argument(
        "--at", help="a commit number, id or tag (a dataset: a tag its shards carry)"
    )
    parser.add_argument(
        "--episodes", action="store_true", help="print the episode table (of each shard)"
    )
    args = parser.parse_args(argv)
    try:
        store = Store(args.location)
        raw = store.get("zarr.json")
    except Exception as err:  # a missing folder, an unreachable or unknown bucket, ...
        parser.error(f"cannot open {args.location}: {err}")
    if raw is None:
        parser.error(f"no vault or dataset at {args.location} (no zarr.json there)")
    try:
        root = parse_object(raw, f"{store.url}/zarr.json")
        attrs = root.get("attributes")
        attrs = attrs if isinstance(attrs, dict) else {}
        if "rlvault" not in attrs and "rlvault_dataset" not in attrs:
            parser.error(
                f"{args.location} is neither a vault nor a dataset root (its zarr.json has "
                "no rlvault attributes)"
            )
        if "rlvault_dataset" in attrs:
            out = dataset_summary(SpecDataset(store), args.at, args.episodes)
        else:
            vault = SpecVault(store)
            if args.at is not None:
                vault = vault.at(int(args.at) if args.at.isdigit() else args.at)
            out = summary(vault, args.episodes)
    except PinError as err:
        parser.error(str(err))
    except SpecError as err:
        print(f"{parser.prog}: refused: {err}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
