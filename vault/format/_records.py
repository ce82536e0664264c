"""The on-disk format, in one place: key names, the chunk-key rule, and typed records.

A vault is a Zarr v3 hierarchy::

    zarr.json                 root group; attributes["rlvault"] is the manifest
    commit/zarr.json          empty group; attributes["rlvault_commit"] is the commit record
    experience/<leaf path>/   one array per pytree leaf, shape [rows, time, ...]
    episodes/bounds, returns  the episode index (when the vault names a done leaf)
    lock/, trash/             the writer's lock and old file versions (local vaults)
    history/<n>, refs/<name>  replaced commit records (pins) and tags; each folder is an empty
                              Zarr group (zarr.json) so that zarr-python lists the hierarchy

The manifest (:class:`Manifest`: structure, leaves, rows, episode leaves, user metadata) is
written once at creation; the commit record (:class:`CommitRecord`) is replaced atomically by
every append. Both are validated when loaded: a malformed one is :class:`VaultCorruptError`
naming every problem, one from a newer format is :class:`VaultVersionError`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vault._errors import VaultCorruptError, VaultNotFoundError, VaultVersionError
from vault.format import _structure
from vault.format._json import (
    DIGEST,
    digest,
    digest_problems,
    group_json,
    is_int,
    is_int_list,
    parse_json,
)
from vault.format._limits import (
    DTYPES,
    MAX_CHUNK_BYTES,
    MAX_RANK,
    MAX_STRUCTURE_DEPTH,
    codec_problems,
)
from vault.format._parts import (
    SEAMS_KEY,
    Edge,
    EpisodeState,
    OpenEpisodes,
    PendingTags,
    Seam,
    episode_record_problems,
    seam_problems,
)

FORMAT_VERSION = 5
"""2: episode index; 3: digests, chunks bound to places (tags/, edges); 4: every item chunk
bound; 5: the latest place tags kept in the commit record (``vault/format/_tags.py``). 1 and 2
still open (without those protections)."""
DIGESTS_SINCE = 3
PENDING_TAGS_SINCE = 5
PENDING_TAGS = "tags"  # commit record: per array, the place tags not yet in its tag array

# ------------------------------------------------------------------------------- key names
ZARR_JSON = "zarr.json"
CHUNK_KEYS = {"name": "default", "configuration": {"separator": "/"}}  # every array's (section 4.2)
MANIFEST_KEY = ZARR_JSON  # the root group's metadata; the manifest lives in its attributes
COMMIT_KEY = "commit/zarr.json"  # an empty Zarr group whose attributes hold the record
EXPERIENCE = "experience"
EPISODES = "episodes"
BOUNDS = "episodes/bounds"
INDEX_CHUNK = 8192  # episodes per chunk: 256 KiB of bounds, 64 KiB of returns
RETURNS = "episodes/returns"
LOCK_DIR = "lock"
FENCE = "fence"  # commit record: the token of the writer that fenced it (object stores)
UID = "uid"  # commit record: random per commit; "<seq>-<uid>" is the commit's id
HISTORY = "history"  # history/<seq>: the record of every commit before the latest
REFS = "refs"  # refs/<name>: tags, each naming a commit id (never moved)
TRASH_DIR = "trash"
TAGS = "tags"  # tags/<array key>: the stored crc32c of every complete chunk, by place
MANIFEST_ATTR = "rlvault"
DATASET_ATTR = "rlvault_dataset"  # a dataset root's attributes (vault/dataset/_dataset.py)
SHARDS = "shards"  # a dataset's shards are the vaults under ROOT/shards/
COMMIT_ATTR = "rlvault_commit"
FILL_CHUNKS_KEY = "fill_chunks_stored"
"""Manifest flag: the writer stores every chunk, even one equal to the fill value, so a chunk
missing in the committed range is lost (without it, only a warning: TensorStore skips those)."""
DIMS_KEY = "dimension_names"
"""Manifest flag: every array's ``zarr.json`` carries the dimension names of
``vault.storage._arrays.dimension_names``, checked on opening. Vaults without it (item axes named
``dim_<i>``) open unchecked. Older rlvault reads it unchanged: no new format version."""

_KINDS = {"dict", "namedtuple", "dataclass", "tuple", "list", "leaf", "none"}
EPISODE_ROLES = ("done", "truncated", "reward")


def leaf_key(name: str) -> str:
    """The key prefix of a leaf's array (``experience/obs/rgb``)."""
    return f"{EXPERIENCE}/{name}"


def chunk_key(index: Sequence[int], encoding: str = "default", separator: str = "/") -> str:
    """The key of a chunk (relative to its array) under a Zarr v3 chunk-key encoding."""
    parts = separator.join(str(int(i)) for i in index)
    return f"c{separator}{parts}" if encoding == "default" else parts


# --------------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class LeafSpec:
    """One leaf of a vault, as its manifest records it.

    Attributes:
        name: the leaf's path (``"obs"``, ``"info/x"``).
        shape: its item shape (per row and timestep).
        dtype: its dtype's name.
        chunk: the chunk shape ``[rows, time, *shape]``.
        codecs: the Zarr v3 codec chain (ending with ``crc32c``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunk: tuple[int, ...]  # [rows, time, *shape]
    codecs: tuple[dict[str, Any], ...]

    @property
    def step_bytes(self) -> int:
        """Bytes of one timestep of one row."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def chunk_time(self) -> int:
        """Timesteps per chunk."""
        return self.chunk[1]

    @property
    def item_chunks(self) -> tuple[int, ...]:
        """Chunks along each item axis (all 1 when a chunk holds whole items)."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk[2:], strict=True))

    def to_json(self) -> dict[str, Any]:
        """Returns the leaf as the manifest stores it (lists, not tuples)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "chunk": list(self.chunk),
            "codecs": [dict(c) for c in self.codecs],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LeafSpec:
        """Returns the leaf of a manifest's entry (validated with the manifest).

        Args:
            doc: the entry, as :meth:`to_json` writes it.
        """
        return cls(
            name=doc["name"],
            shape=tuple(doc["shape"]),
            dtype=np.dtype(doc["dtype"]).name,
            chunk=tuple(doc["chunk"]),
            codecs=tuple(doc["codecs"]),
        )


@dataclasses.dataclass(frozen=True)
class EpisodeLeaves:
    """The leaves that delimit episodes, for a vault that keeps an episode index.

    Attributes:
        done: the path of the episode-end flags (required to keep an index).
        truncated: the path of the truncation flags, or None.
        reward: the path of the rewards (for episode returns), or None.
    """

    done: str
    truncated: str | None = None
    reward: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns ``{"done", "truncated", "reward"}`` -> path or None, as stored."""
        return {"done": self.done, "truncated": self.truncated, "reward": self.reward}

    def as_dict(self) -> dict[str, str | None]:
        """Returns ``{"done", "truncated", "reward"}`` -> path or None."""
        return self.to_json()


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a vault holds: written once, by ``Vault.create``, validated on every open.

    Attributes:
        rows: rows of every leaf.
        structure: the pytree's containers (dict keys, named fields, tuple and list
            indices), to rebuild the state a read returns.
        leaves: every leaf, in the structure's leaf order (the order of ``leaf_names``).
        created: when the vault was created (ISO 8601, UTC).
        rlvault_version: the rlvault that created it.
        user_metadata: the metadata given at creation.
        episodes: the episode leaves, or None (no episode index).
        fill_chunks_stored: every chunk is stored, even one of fill values (a missing chunk
            is then an error, never the fill value).
        dimension_names: the arrays carry dimension names, checked on open.
        format_version: the on-disk format version.
    """

    rows: int
    structure: dict[str, Any]
    leaves: tuple[LeafSpec, ...]
    created: str
    rlvault_version: str
    user_metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    episodes: EpisodeLeaves | None = None
    fill_chunks_stored: bool = True
    dimension_names: bool = True  # the arrays carry checked dimension names (DIMS_KEY)
    format_version: int = FORMAT_VERSION

    @property
    def leaf_names(self) -> list[str]:
        """Every leaf's path, in the structure's leaf order (a dict's keys sorted, a tuple's or
        named tuple's fields in order: the order ``jax.tree_util`` flattens it in)."""
        return [leaf.name for leaf in self.leaves]

    def leaf(self, name: str) -> LeafSpec:
        """Returns the leaf at a path.

        Args:
            name: the leaf's path.

        Raises:
            KeyError: no leaf at that path.
        """
        for leaf in self.leaves:
            if leaf.name == name:
                return leaf
        raise KeyError(name)

    @property
    def step_bytes(self) -> int:
        """Bytes of one timestep of one row, every leaf."""
        return sum(leaf.step_bytes for leaf in self.leaves)

    @functools.cached_property
    def chunk_times(self) -> dict[str, int]:
        """Timesteps per chunk of each leaf's array, by its key (``experience/obs``)."""
        return {leaf_key(leaf.name): leaf.chunk[1] for leaf in self.leaves}

    def to_json(self) -> dict[str, Any]:
        """Returns the manifest as the root ``zarr.json`` stores it, with its digest."""
        doc: dict[str, Any] = {
            "format_version": self.format_version,
            "rlvault_version": self.rlvault_version,
            "created": self.created,
            "rows": self.rows,
            "structure": self.structure,
            "leaves": [leaf.to_json() for leaf in self.leaves],
            "user_metadata": dict(self.user_metadata),
        }
        if self.fill_chunks_stored:
            doc[FILL_CHUNKS_KEY] = True
        if self.dimension_names:
            doc[DIMS_KEY] = True
        if self.episodes is not None:
            doc["episodes"] = self.episodes.to_json()
        doc[DIGEST] = digest(doc)
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Manifest:
        """A validated manifest.

        Args:
            doc: the manifest's JSON object.
            where: the vault's location, for messages.

        Returns:
            The manifest.

        Raises:
            VaultVersionError: a newer format than this rlvault reads.
            VaultCorruptError: a malformed manifest (every problem listed).
        """
        version = doc.get("format_version") if isinstance(doc, dict) else None
        if is_int(version, 1) and version > FORMAT_VERSION:
            raise VaultVersionError(
                f"{where}: the vault is in format version {version}; this rlvault reads "
                f"versions 1 to {FORMAT_VERSION}. Upgrade rlvault (pip install -U rlvault)."
            )
        problems = manifest_problems(doc)
        if not problems:
            problems = digest_problems(doc, doc["format_version"] >= DIGESTS_SINCE)
        if problems:
            raise VaultCorruptError(
                f"{where}: the manifest ({MANIFEST_KEY}) is malformed: "
                + "; ".join(problems)
                + f". Run `vault verify {where}` for a full report; restore the vault from a "
                "copy."
            )
        cfg = doc.get("episodes")
        return cls(
            rows=doc["rows"],
            structure=doc["structure"],
            leaves=tuple(LeafSpec.from_json(leaf) for leaf in doc["leaves"]),
            created=doc["created"],
            rlvault_version=doc["rlvault_version"],
            user_metadata=dict(doc.get("user_metadata", {})),
            episodes=None
            if cfg is None
            else EpisodeLeaves(**{k: cfg.get(k) for k in EPISODE_ROLES}),
            fill_chunks_stored=doc.get(FILL_CHUNKS_KEY) is True,
            dimension_names=doc.get(DIMS_KEY) is True,
            format_version=int(doc["format_version"]),
        )


@dataclasses.dataclass(frozen=True)
class CommitRecord:
    """The truth about what is committed: replaced atomically after the data is written.

    Attributes:
        committed_length: committed timesteps per row; readers never look past it.
        source_counter: the buffer's write counter at the last ``write``, or None.
        seq: commits so far (the commit's number).
        seams: every seam of the committed data.
        episodes: the episode index's committed count and each row's open episode, or None.
        edges: per array, the stored checksums of its partly written last chunk (None in a
            format without them).
        fence: the token of the writer that fenced the record (object stores), or None.
        uid: random per commit (None: written before commits had ids).
        tags: per array, the place tags of its latest complete chunks, not yet in its tag
            array (format 5; None in an older format).
    """

    committed_length: int
    source_counter: int | None = None  # the buffer's write counter at the last write()
    seq: int = 0  # commits so far
    seams: tuple[Seam, ...] = ()
    episodes: EpisodeState | None = None
    edges: dict[str, Edge] | None = None  # by array key; None: a format without them
    fence: str | None = None  # the token of the writer that fenced the record (object stores)
    uid: str | None = None  # random per commit (None: written before commits had ids)
    tags: dict[str, PendingTags] | None = None  # by array key; None: a format without them

    def to_json(self) -> dict[str, Any]:
        """Returns the record as ``commit/zarr.json`` stores it, with its digest."""
        doc: dict[str, Any] = {
            "committed_length": self.committed_length,
            "source_counter": self.source_counter,
            "seq": self.seq,
            SEAMS_KEY: [s.to_json() for s in self.seams],
        }
        if self.episodes is not None:
            doc["episodes"] = self.episodes.to_json()
        if self.edges is not None:
            doc["edges"] = {k: e.to_json() for k, e in sorted(self.edges.items())}
        if self.fence is not None:
            doc[FENCE] = self.fence
        if self.uid is not None:
            doc[UID] = self.uid
        if self.tags:
            doc[PENDING_TAGS] = {k: t.to_json() for k, t in sorted(self.tags.items())}
        doc[DIGEST] = digest(doc)
        return doc

    def to_bytes(self) -> bytes:
        """Returns ``commit/zarr.json``: a Zarr group whose attributes hold the record.

        Made once, without whitespace: an append writes its record, and the next one the same
        bytes to history."""
        if "_bytes" not in self.__dict__:
            self.__dict__["_bytes"] = group_json({COMMIT_ATTR: self.to_json()}, compact=True)
        return self.__dict__["_bytes"]

    @classmethod
    def from_json(cls, doc: Any, where: object, manifest: Manifest) -> CommitRecord:
        """A validated commit record.

        Args:
            doc: the record's JSON object.
            where: the vault's location, for messages.
            manifest: the vault's manifest (what the record must agree with).

        Returns:
            The record.

        Raises:
            VaultCorruptError: a malformed record (every problem listed).
        """
        problems = commit_problems(doc, manifest)
        if not problems:
            problems = digest_problems(doc, manifest.format_version >= DIGESTS_SINCE)
        if problems:
            raise VaultCorruptError(
                f"{where}: the commit record ({COMMIT_KEY}) is malformed: "
                + "; ".join(problems)
                + f". Run `vault verify {where}` for a full report."
            )
        episodes = doc.get("episodes") if manifest.episodes is not None else None
        seams = doc.get(SEAMS_KEY)
        edges = doc.get("edges", {}) if manifest.format_version >= DIGESTS_SINCE else None
        pending = (
            doc.get(PENDING_TAGS, {}) if manifest.format_version >= PENDING_TAGS_SINCE else None
        )
        return cls(
            committed_length=doc["committed_length"],
            source_counter=doc.get("source_counter"),
            seq=doc.get("seq", 0),
            seams=tuple(Seam(int(g["at"]), int(g["lost"])) for g in seams) if seams else (),
            episodes=None
            if episodes is None
            else EpisodeState(int(episodes["count"]), OpenEpisodes.from_json(episodes["open"])),
            edges=None if edges is None else {k: Edge.from_json(e) for k, e in edges.items()},
            fence=doc.get(FENCE),
            uid=doc.get(UID),
            tags=None
            if pending is None
            else {k: PendingTags.from_json(t) for k, t in pending.items()},
        )


def read_manifest_bytes(raw: bytes | None, where: str) -> Manifest:
    """The manifest from the root ``zarr.json`` (``None``: absent)."""
    if raw is None:
        raise VaultNotFoundError(f"no vault at {where} (no {MANIFEST_KEY})")
    group = parse_json(raw, f"{where}/{MANIFEST_KEY}")
    doc = group.get("attributes", {}).get(MANIFEST_ATTR) if isinstance(group, dict) else None
    if not isinstance(doc, dict):
        attrs = group.get("attributes") if isinstance(group, dict) else None
        if isinstance(attrs, dict) and isinstance(attrs.get(DATASET_ATTR), dict):
            raise VaultNotFoundError(
                f"{where} is a dataset of shards, not a vault: open it with Dataset.open "
                f"(`vault ls {where}` lists its shards, each a vault)"
            )
        raise VaultNotFoundError(
            f"{where} is a Zarr node but not an rlvault vault (no '{MANIFEST_ATTR}' attributes)"
        )
    return Manifest.from_json(doc, where)


def read_commit_bytes(raw: bytes | None, where: object, manifest: Manifest) -> CommitRecord:
    """The commit record from ``commit/zarr.json`` (``None``: absent), checked against
    ``manifest``; ``where`` names the vault (made into text only for a message)."""
    if raw is None:
        raise VaultCorruptError(f"{where}: missing {COMMIT_KEY} (the commit record)")
    group = parse_json(raw, where, COMMIT_KEY)
    attributes = group.get("attributes")
    doc = attributes.get(COMMIT_ATTR) if isinstance(attributes, dict) else None
    if not isinstance(doc, dict):
        raise VaultCorruptError(f"{where}/{COMMIT_KEY}: no '{COMMIT_ATTR}' attributes")
    return CommitRecord.from_json(doc, where, manifest)


# ------------------------------------------------------------------------------ validation
def manifest_problems(manifest: Any) -> list[str]:
    """Every way ``manifest`` (the ``rlvault`` attributes of the root ``zarr.json``) departs
    from the schema that ``Vault.create`` writes."""
    if not isinstance(manifest, dict):
        return [f"the 'rlvault' attributes must be an object, got {type(manifest).__name__}"]
    out = []
    version = manifest.get("format_version")
    if not is_int(version, 1) or version > FORMAT_VERSION:
        out.append(f"format_version {version!r} is not one of 1..{FORMAT_VERSION}")
    if not is_int(manifest.get("rows"), 1):
        out.append(f"rows must be an int >= 1, got {manifest.get('rows')!r}")
    for key in ("rlvault_version", "created"):
        if not isinstance(manifest.get(key), str):
            out.append(f"{key} must be a string, got {manifest.get(key)!r}")
    if not isinstance(manifest.get("user_metadata", {}), dict):
        out.append("user_metadata must be an object")
    if manifest.get(DIMS_KEY, True) is not True:
        out.append(f"{DIMS_KEY} must be true or absent, got {manifest.get(DIMS_KEY)!r}")
    structure = manifest.get("structure")
    node_problems = _node_problems(structure, "structure")
    out += node_problems
    leaves = manifest.get("leaves")
    if not isinstance(leaves, list):
        return [*out, f"leaves must be a list, got {type(leaves).__name__}"]
    for i, leaf in enumerate(leaves):
        out += [f"leaves[{i}]: {p}" for p in _leaf_problems(leaf)]
    listed = [leaf.get("name") for leaf in leaves if isinstance(leaf, dict)]
    if not node_problems:
        names = _structure.leaf_names(structure)  # type: ignore[arg-type]
        if listed != names:
            out.append(f"leaves {listed} do not match the structure's leaves {names}")
    shapes = {leaf.get("name"): leaf.get("shape") for leaf in leaves if isinstance(leaf, dict)}
    return out + _episodes_config_problems(manifest.get("episodes"), shapes)


def commit_problems(record: Any, manifest: Manifest) -> list[str]:
    """Every way a commit record departs from the schema (given the vault's manifest)."""
    if not isinstance(record, dict):
        return [f"the record must be an object, got {type(record).__name__}"]
    out = []
    length = record.get("committed_length")
    if not is_int(length, 0):
        return [f"committed_length must be an int >= 0, got {length!r}"]
    if not is_int(record.get("seq", 0), 0):
        out.append(f"seq must be an int >= 0, got {record.get('seq')!r}")
    counter = record.get("source_counter")
    if counter is not None and not is_int(counter, 0):
        out.append(f"source_counter must be null or an int >= 0, got {counter!r}")
    for key in (FENCE, UID):
        if not isinstance(record.get(key, ""), str):
            out.append(f"{key} must be a string, got {record.get(key)!r}")
    out += seam_problems(record.get(SEAMS_KEY, []), length)
    edge_problems = _edge_problems(record.get("edges", {}), manifest.rows)
    out += edge_problems
    episodes = None
    if manifest.episodes is not None:
        found = episode_record_problems(record.get("episodes"), manifest.rows, length)
        out += found
        episodes = None if found else record["episodes"]["count"]
    if not edge_problems:
        out += _edge_place_problems(record.get("edges", {}), manifest, length, episodes)
    if PENDING_TAGS in record and manifest.format_version >= PENDING_TAGS_SINCE:
        out += _pending_problems(record[PENDING_TAGS], manifest, length, episodes)
    return out


def _pending_problems(
    pending: Any, manifest: Manifest, length: int, episodes: int | None
) -> list[str]:
    """The kept place tags (format 5) name arrays of the vault, each from a time chunk ``from``
    up to its complete chunks, one uint32 per chunk bound to those places."""
    if not isinstance(pending, dict):
        return [f"{PENDING_TAGS} must be an object, got {type(pending).__name__}"]
    places = {  # array key -> (row blocks x chunks bound per place, chunk length, length)
        leaf_key(leaf.name): (-(-manifest.rows // leaf.chunk[0]) * math.prod(leaf.item_chunks),
                              leaf.chunk[1], length)
        for leaf in manifest.leaves
    }  # fmt: skip
    if episodes is not None:
        places.update(dict.fromkeys((BOUNDS, RETURNS), (1, INDEX_CHUNK, episodes)))
    out = []
    for key, entry in pending.items():
        what = f"{PENDING_TAGS}[{key!r}]"
        if key not in places:
            out.append(f"{what} names no array of this vault")
            continue
        per, step, end = places[key]
        start, values = (
            (entry.get("from"), entry.get("tags")) if isinstance(entry, dict) else (0, 0)
        )
        if not is_int(start, 0) or start > end // step:
            out.append(f"{what} must start at a time chunk in [0, {end // step}], got {start!r}")
        elif (
            not is_int_list(values, 0)
            or len(values) != per * (end // step - start)
            or any(v >> 32 for v in values)
        ):
            got = f"{len(values)} values" if isinstance(values, list) else repr(values)[:80]
            want = per * (end // step - start)
            out.append(f"{what}['tags'] must be {want} uint32 tags (from {start}), got {got}")
    return out


def _edge_place_problems(
    edges: dict[str, Any], manifest: Manifest, length: int, episodes: int | None
) -> list[str]:
    """An edge names an array of the vault and the start of its partly filled last chunk
    (``committed // chunk * chunk``, short of the committed end)."""
    steps = manifest.chunk_times
    out = []
    for key, edge in edges.items():
        if key in steps:
            end, step = length, steps[key]
        elif episodes is not None and key in (BOUNDS, RETURNS):
            end, step = episodes, INDEX_CHUNK
        else:
            out.append(f"edges[{key!r}] names no array of this vault")
            continue
        if edge["from"] != end // step * step or edge["from"] >= end:
            out.append(
                f"edges[{key!r}] starts at {edge['from']}, not where the partly filled last "
                f"chunk of {end} committed starts ({end // step * step})"
            )
    return out


def _episodes_config_problems(cfg: Any, shapes: dict[Any, Any]) -> list[str]:
    if cfg is None:
        return []
    if not isinstance(cfg, dict) or not isinstance(cfg.get("done"), str):
        return [f"episodes must name at least a 'done' leaf, got {cfg!r}"]
    out = []
    for role in EPISODE_ROLES:
        name = cfg.get(role)
        if name is None:
            continue
        if name not in shapes:
            out.append(f"episodes.{role} names {name!r}, which is not a leaf")
        elif shapes[name] != []:
            out.append(f"episodes.{role} leaf {name!r} has shape {shapes[name]}, expected []")
    return out


def _node_problems(node: Any, where: str, depth: int = 0) -> list[str]:
    if depth > MAX_STRUCTURE_DEPTH:
        return [f"{where}: containers nested more than {MAX_STRUCTURE_DEPTH} levels deep"]
    if not isinstance(node, dict) or node.get("kind") not in _KINDS:
        kind = node.get("kind") if isinstance(node, dict) else node
        return [f"{where}: unknown node {kind!r}"]
    kind = node["kind"]
    if kind in ("leaf", "none"):
        return []
    children = node.get("children")
    if not isinstance(children, list):
        return [f"{where}: a {kind} node needs a list of children"]
    labels_key = {"dict": "keys", "namedtuple": "fields", "dataclass": "fields"}.get(kind)
    out = []
    if labels_key is not None:
        labels = node.get(labels_key)
        if not isinstance(labels, list) or len(labels) != len(children):
            out.append(f"{where}: {labels_key} must list one name per child")
        elif not all(isinstance(x, str) for x in labels):
            out.append(f"{where}: {labels_key} must be strings")
        if kind != "dict" and not isinstance(node.get("class"), str):
            out.append(f"{where}: a {kind} node needs its 'class'")
    for i, child in enumerate(children):
        out += _node_problems(child, f"{where}.children[{i}]", depth + 1)
        if len(out) > 20:  # enough to say what is wrong
            break
    return out


def _leaf_problems(leaf: Any) -> list[str]:
    if not isinstance(leaf, dict):
        return ["must be an object"]
    out = []
    if not isinstance(leaf.get("name"), str):
        out.append(f"name must be a string, got {leaf.get('name')!r}")
    shape = leaf.get("shape")
    if not is_int_list(shape, 0) or len(shape) > MAX_RANK - 2:
        out.append(f"shape must be a list of at most {MAX_RANK - 2} ints >= 0, got {shape!r}")
        shape = None
    dtype = leaf.get("dtype")
    if dtype not in DTYPES:
        out.append(f"dtype {dtype!r} is not one a vault stores ({', '.join(DTYPES)})")
    chunk = leaf.get("chunk")
    if not is_int_list(chunk, 1) or (shape is not None and len(chunk) != len(shape) + 2):
        out.append(f"chunk must be [rows, time, *shape] ints >= 1, got {chunk!r}")
    elif dtype in DTYPES and math.prod(chunk) * np.dtype(dtype).itemsize > MAX_CHUNK_BYTES:
        out.append(
            f"chunk {chunk} of {dtype} is {math.prod(chunk) * np.dtype(dtype).itemsize} bytes, "
            f"more than a chunk can be ({MAX_CHUNK_BYTES})"
        )
    out += codec_problems(leaf.get("codecs"))
    return out


def _edge_problems(edges: Any, rows: int) -> list[str]:
    if not isinstance(edges, dict):
        return [f"edges must be an object, got {type(edges).__name__}"]
    out = []
    for key, edge in edges.items():
        crc = edge.get("crc") if isinstance(edge, dict) else None
        if not (
            is_int_list(crc, 0)
            and (len(crc) == 1 or len(crc) == rows)
            and is_int(edge.get("from"), 0)
            and is_int_list(edge.get("tail", []), 0)
        ):
            out.append(
                f"edges[{key!r}] must be {{'from': int, 'crc': [int per row], 'tail': [int per "
                "row block]}"
            )
    return out
