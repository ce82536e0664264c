"""Datasets of shards: many writers, one dataset, no coordinator.

A dataset is a root (a local path or ``s3://bucket/prefix``) whose ``zarr.json`` fixes the
structure once (leaves, shapes, dtypes, codecs, chunking, episode leaves: a manifest
*template*), and a folder ``shards/`` of vaults, one per writer. Any process on any machine
adds its shard under a unique name (:meth:`Dataset.shard`) and writes it with a vault's usual
guarantees (its own writer lock, commit record and checksums); writers never wait for each
other and need no lock server: the only shared object is the root's ``zarr.json``, written
once by a create-if-absent (a conditional write the store enforces).

Readers (:meth:`Dataset.open`) see every shard's committed data as one: reads by shard, the
episode table across shards (with a ``shard`` column), statistics, verification and streams
over every shard; :meth:`Dataset.refresh` picks up new shards and new commits. A shard whose
manifest does not match the template is refused (:class:`VaultStructureError` naming it);
one still being created (no manifest yet) is not shown until it is. Readers of many shards
keep a cache at the root, the catalog (``vault/dataset/_catalog.py``), so that the next reader
need not parse every shard's records nor read its index; a shard's writer adds its entry when
it closes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vault._args import bool_arg, int_arg
from vault._errors import (
    VaultArgumentError,
    VaultCorruptError,
    VaultExistsError,
    VaultModeError,
    VaultNotFoundError,
    VaultPinError,
    VaultReadError,
    VaultStructureError,
    VaultVersionError,
)
from vault.commits._pins import check_tag_name, create_tag, tag_commit
from vault.dataset import _catalog as catalog_io
from vault.dataset import _shards as shards_io
from vault.dataset._reading import DatasetReadMethods
from vault.dataset._shards import ManifestCache, Shard
from vault.facade._vault import Vault, vault_of_writer
from vault.format._episodes import EpisodeTable
from vault.format._records import (
    DATASET_ATTR,
    MANIFEST_KEY,
    REFS,
    SHARDS,
    Manifest,
    digest,
    group_json,
    parse_json,
)
from vault.storage._arrays import codec_text
from vault.storage._kinds import LocationLike, parse_location
from vault.storage._location import ABSENT, Location, vault_kind
from vault.write._create import create_vault, plan_manifest

if TYPE_CHECKING:
    from vault.commits._pins import Pin

DATASET_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CATALOG_EVERY = 10.0  # seconds between a Dataset object's writes of the catalog
CATALOG_MIN_SHARDS = 8  # fewer shards: no catalog is written (it would save little)
_COMMIT_ID = re.compile(r"\d+(-[0-9a-f]{4,64})?")


def is_dataset(location: LocationLike, storage: dict[str, Any] | None = None) -> bool:
    """Whether a dataset's root is at ``location`` (rather than a vault, or nothing).

    Args:
        location: a path or URL.
        storage: object-store settings, as in :meth:`Vault.create`.

    Returns:
        True for a dataset's root (an unreadable root is not a dataset to open).
    """
    where = parse_location(location, storage)
    try:
        return _read_root(where) is not None
    except VaultCorruptError:  # an unreadable zarr.json: whatever it is, not a dataset to open
        return False


def _read_root(where: Location) -> dict[str, Any] | None:
    return _root_doc(where, where.read(MANIFEST_KEY))


def _root_doc(where: Location, raw: bytes | None) -> dict[str, Any] | None:
    """The dataset attributes of a root ``zarr.json`` (None: absent, or not a dataset)."""
    if raw is None:
        return None
    doc = parse_json(raw, f"{where}/{MANIFEST_KEY}")
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    if not isinstance(attrs, dict) or not isinstance(attrs.get(DATASET_ATTR), dict):
        return None
    return dict(attrs[DATASET_ATTR])


def root_json(template: Manifest) -> bytes:
    """The root ``zarr.json`` of a dataset whose shards are shaped like ``template``."""
    return group_json({DATASET_ATTR: {"format": DATASET_FORMAT, "template": template.to_json()}})


def _template_of(doc: dict[str, Any], where: Location) -> Manifest:
    version = doc.get("format")
    if type(version) is int and version > DATASET_FORMAT:
        raise VaultVersionError(
            f"{where}: the dataset is in format {version}; this rlvault reads dataset format "
            f"{DATASET_FORMAT}. Upgrade rlvault (pip install -U rlvault)."
        )
    if type(version) is not int or version != DATASET_FORMAT:  # JSON true or 1.0 are not 1
        raise VaultStructureError(
            f"{where}: dataset format {json.dumps(version)} is not a format version; this "
            f"rlvault reads format {DATASET_FORMAT}"
        )
    return Manifest.from_json(doc.get("template"), f"{where} (dataset template)")


def structure_problems(template: Manifest, manifest: Manifest) -> list[str]:
    """How ``manifest`` (a shard's) departs from the dataset's ``template``: leaf names,
    shapes, dtypes, pytree structure and episode leaves must be the same."""
    out = []
    if manifest.structure != template.structure:
        out.append("its pytree structure differs")
    want = {leaf.name: (leaf.shape, leaf.dtype) for leaf in template.leaves}
    got = {leaf.name: (leaf.shape, leaf.dtype) for leaf in manifest.leaves}
    for name in sorted(set(want) | set(got)):
        if name not in got:
            out.append(f"leaf {name!r} is missing")
        elif name not in want:
            out.append(f"leaf {name!r} is not in the dataset")
        elif want[name] != got[name]:
            out.append(
                f"leaf {name!r} is {got[name][1]} {list(got[name][0])}, "
                f"expected {want[name][1]} {list(want[name][0])}"
            )
    if manifest.episodes != template.episodes:
        out.append("its episode leaves differ")
    return out


def _check_whole(where: Location, tag: str, refs: list[bytes]) -> None:
    """A dataset tag is on as many shards as it was made for (each shard's tag records how
    many: ``dataset_shards``), else it was interrupted (:class:`VaultPinError`)."""
    made_for = 0
    for raw in refs:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            made_for = max(made_for, int(json.loads(raw).get("dataset_shards") or 0))
    if len(refs) < made_for:
        raise VaultPinError(
            f"{where}: tag {tag!r} is on {len(refs)} of the {made_for} shards it was made for "
            f"(Dataset.tag was interrupted): tag the dataset again, Dataset.tag({tag!r}) or "
            f"`vault tag {where} {tag}`, which completes it"
        )


def _tag_shards(where: Location, name: str, vaults: dict[str, Vault]) -> dict[str, str]:
    """:meth:`Dataset.tag` of the shards ``vaults``: every one checked first, then tagged."""
    check_tag_name(name)
    refs = where.read_many([f"{SHARDS}/{s}/{REFS}/{name}" for s in vaults])
    existing = {
        shard: tag_commit(ref, vault.location, name)
        for (shard, vault), ref in zip(vaults.items(), refs, strict=True)
        if ref is not None
    }
    held = [ref for ref in refs if ref is not None]
    try:
        _check_whole(where, name, held)
        interrupted = False
    except VaultPinError:
        interrupted = True  # tagging again completes it
    count = len(vaults)  # in every shard's tag: an interrupted tag is then told apart
    if interrupted:  # the shards tagged already keep their commits (they may have gone on)
        return {
            shard: existing[shard] if shard in existing else create_tag(v.snapshot, name, count)
            for shard, v in vaults.items()
        }
    taken = [f"{s} ({c})" for s, c in existing.items() if c != vaults[s].commit_id]
    if taken:
        raise VaultExistsError(
            f"{where}: tag {name!r} already names other commits of shards "
            f"{', '.join(taken)}; tags never move (choose another name)"
        )
    added = [s for s in vaults if s not in existing]
    if held and added:  # a whole tag never takes in shards added since
        raise VaultExistsError(
            f"{where}: tag {name!r} names {len(held)} shards already, and "
            f"{', '.join(added)} joined since; tags never move (choose another name)"
        )
    return {shard: create_tag(v.snapshot, name, count) for shard, v in vaults.items()}


def setting_problems(
    template: Manifest, asked: Manifest, codec: bool, chunk: dict[str, Any]
) -> list[str]:
    """How the codecs (where ``codec``: given) and the chunks of the leaves in ``chunk`` of
    ``asked`` (a joining actor's plan) depart from the dataset's ``template``."""
    out = []
    like = shard_manifest(template, asked.rows)  # a shard of the asked rows, as it would be
    for want, got in zip(like.leaves, asked.leaves, strict=True):
        if codec and want.codecs != got.codecs:
            out.append(
                f"leaf {want.name!r} has codec {codec_text(want.codecs)}, not the "
                f"{codec_text(got.codecs)} asked (leave codec= and level= out to join)"
            )
        # the rows of a chunk are at most a shard's rows (as shard_manifest makes them)
        asked_chunk = (min(got.chunk[0], asked.rows), *got.chunk[1:])
        if want.name in chunk and tuple(want.chunk) != asked_chunk:
            out.append(
                f"leaf {want.name!r} has chunk {list(want.chunk)}, not the {list(got.chunk)} "
                "asked (leave chunk= out to join)"
            )
    return out


def default_shard_name() -> str:
    """``<host>-<pid>-<random>``: unique across processes and machines."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Dataset(DatasetReadMethods):
    """A dataset of shards: one vault per writer, read as one.

    Create it (or join it) with :meth:`create`, write a shard with :meth:`shard`, read it with
    :meth:`open`.

    Examples:
        >>> import numpy as np
        >>> from vault import Dataset
        >>> dataset = Dataset.create("runs/doc-ds", {"x": np.float32(0)}, rows=2, exist_ok=True)
        >>> with dataset.shard("actor-0") as writer:
        ...     writer.append({"x": np.zeros((2, 5), np.float32)})
        5
        >>> reader = Dataset.open("runs/doc-ds")
        >>> reader.shards, reader.timesteps
        (['actor-0'], 10)
    """

    def __init__(self, location: Location, template: Manifest) -> None:
        self._where = location
        self._template = template
        self._shards: dict[str, Shard] = {}  # by name, sorted; arrays opened on first read
        self._manifests = ManifestCache(self._check_shard)
        self._tag: str | None = None  # the tag this dataset is pinned to (None: the latest)
        self._catalog: catalog_io.Catalog | None = None  # as last read or written
        self._catalog_key = digest(template.to_json())
        self._catalog_written = -float("inf")  # time.monotonic() of this object's last write
        self._write_catalog = False  # Dataset.open(write_catalog=True) allows it
        self._catalog_writes = 0
        self._catalog_found = "absent"  # what open found: "absent", "damaged" or "valid"
        self._shard_rows: int | None = None  # rows of a new shard (None: the template's)

    # ------------------------------------------------------------------------ entry points
    @classmethod
    def create(
        cls,
        location: LocationLike,
        structure_or_state: Any,
        *,
        rows: int | None = None,
        codec: str | None = "auto",
        level: int | None = None,
        chunk: dict[str, Sequence[int]] | None = None,
        metadata: dict[str, Any] | None = None,
        done_leaf: str | None = None,
        truncated_leaf: str | None = None,
        reward_leaf: str | None = None,
        exist_ok: bool = False,
        storage: dict[str, Any] | None = None,
    ) -> Dataset:
        """Create a dataset whose shards are shaped like a buffer state (or join it).

        Args:
            location: as in :meth:`Vault.create`.
            structure_or_state: as in :meth:`Vault.create`.
            rows: each shard's default rows.
            codec: as in :meth:`Vault.create`.
            level: as in :meth:`Vault.create`.
            chunk: as in :meth:`Vault.create`.
            metadata: as in :meth:`Vault.create`.
            done_leaf: as in :meth:`Vault.create`.
            truncated_leaf: as in :meth:`Vault.create`.
            reward_leaf: as in :meth:`Vault.create`.
            exist_ok: open a dataset already there with the same structure instead (every
                actor can call this at start; exactly one creates it). ``rows`` then sets
                the rows of the shards this object makes; a ``codec``, ``level`` or
                ``chunk`` given must be the dataset's.
            storage: as in :meth:`Vault.create`.

        Returns:
            The dataset (no shard is written yet).

        Raises:
            VaultExistsError: a dataset is there (without ``exist_ok``), or something else.
            VaultStructureError: with ``exist_ok``, the dataset there has another structure,
                or other codecs or chunks than those given.
            VaultArgumentError: ``exist_ok`` not True or False (and the arguments that
                :meth:`Vault.create` refuses).
        """
        exist_ok = bool_arg("exist_ok", exist_ok)
        where = parse_location(location, storage)
        episodes = {"done": done_leaf, "truncated": truncated_leaf, "reward": reward_leaf}
        template = plan_manifest(
            structure_or_state, rows=rows, codec=codec, level=level, chunk=chunk,
            metadata=metadata, episodes=episodes,
        )  # fmt: skip
        raw = where.read(MANIFEST_KEY)
        existing = _root_doc(where, raw)
        if existing is None and raw is not None:
            raise VaultExistsError(
                f"{where} holds a Zarr node that is not a dataset: choose another location"
            )
        if existing is None:
            where.prepare()
            with where.failures("create the dataset"):
                kv = where.kvstore()
                written = kv.write(MANIFEST_KEY, root_json(template), if_equal=ABSENT).result()
            if written.generation:
                return cls(where, template)
            existing = _read_root(where)  # another process created it first
            if existing is None:
                raise VaultExistsError(f"{where}: something else was created there meanwhile")
        if not exist_ok:
            raise VaultExistsError(
                f"a dataset already exists at {where}: open it with Dataset.open, or pass "
                "exist_ok=True"
            )
        theirs = _template_of(existing, where)
        problems = structure_problems(theirs, template) or setting_problems(
            theirs, template, codec != "auto" or level is not None, chunk or {}
        )
        if problems:
            raise VaultStructureError(
                f"{where}: the dataset there has another structure or settings: "
                + "; ".join(problems)
            )
        dataset = cls(where, theirs)
        dataset._shard_rows = rows  # this actor's shards: the rows it asked for
        return dataset

    @classmethod
    def open(
        cls,
        location: LocationLike,
        *,
        at: Pin | None = None,
        storage: dict[str, Any] | None = None,
        write_catalog: bool = False,
    ) -> Dataset:
        """Open the dataset at ``location``, with every shard's committed data as of now.

        Args:
            location: the dataset's root, as in :meth:`Vault.open`.
            at: a tag set by :meth:`tag` (``vault tag DATASET NAME``): the dataset as tagged,
                every shard that has the tag pinned to its tagged commit (shards added later,
                which lack it, are left out); :meth:`refresh` then changes nothing.
            storage: as in :meth:`Vault.open`.
            write_catalog: whether this reader may write the dataset's catalog, a cache at the
                root that lets later readers of many shards open them and build the episode
                table without reading every shard's records (never trusted beyond the exact
                commit records it was made from). A catalog there is always used. Off by
                default: opening and reading a dataset writes nothing (it may be someone
                else's, or read-only; shard writers keep the catalog current as they close).

        Returns:
            The dataset, for reading.

        Raises:
            VaultNotFoundError: no dataset there.
            VaultPinError: no shard has the tag ``at``.
            VaultArgumentError: ``write_catalog`` not True or False.
        """
        write_catalog = bool_arg("write_catalog", write_catalog)
        where = parse_location(location, storage)
        raw, raw_catalog = where.read_many([MANIFEST_KEY, catalog_io.CATALOG_KEY])
        doc = _root_doc(where, raw)
        if doc is None:
            if raw is not None and vault_kind(lambda _key: raw, False) == "ok":
                raise VaultNotFoundError(
                    f"{where} is a vault, not a dataset of shards: open it with Vault.open"
                )
            raise VaultNotFoundError(f"no dataset at {where} (no dataset {MANIFEST_KEY})")
        dataset = cls(where, _template_of(doc, where))
        dataset._write_catalog = write_catalog
        if at is None:
            dataset._catalog = catalog_io.parse(raw_catalog, where, dataset._catalog_key)
            dataset._catalog_found = (
                "absent"
                if raw_catalog is None
                else "damaged"
                if dataset._catalog is None
                else "valid"
            )
            dataset.refresh()
            dataset._save_catalog()
        else:
            dataset._pin(at)
        return dataset

    def _pin(self, tag: Pin) -> None:
        if not isinstance(tag, str) or _COMMIT_ID.fullmatch(tag):
            raise VaultArgumentError(
                f"a dataset is pinned by a tag name (commit numbers and ids are each shard's "
                f"own: open one shard with Vault.open(..., at=...)), got {tag!r}"
            )
        try:
            names = self._list_names() if check_tag_name(tag) else []
        except VaultArgumentError:
            names = []  # not a tag name: no shard has it
        refs = self._where.read_many([f"{SHARDS}/{name}/{REFS}/{tag}" for name in names])
        for name, ref in zip(names, refs, strict=True):
            if ref is None:
                continue  # added after the tag was set
            pinned = Vault.open(self._where.child(f"{SHARDS}/{name}"), at=tag)
            self._check_shard(name, pinned.manifest)
            snap = pinned.snapshot
            self._shards[name] = Shard(
                name, self._where.child(SHARDS), snap.manifest, b"", b"", snap.commit,
                vault=pinned,
            )  # fmt: skip
        if not self._shards:
            raise VaultPinError(f"{self._where}: no shard has the tag {tag!r}")
        _check_whole(self._where, tag, [ref for ref in refs if ref is not None])
        self._tag = tag

    @property
    def tagged(self) -> str | None:
        """The tag this dataset was opened at (None: it shows the latest commits)."""
        return self._tag

    def tag(self, name: str) -> dict[str, str]:
        """Name every shard's current commit, for ``Dataset.open(location, at=name)``.

        As :meth:`Vault.tag`, shard by shard; every shard is checked first, so that nothing is
        tagged when one cannot be.

        Args:
            name: the tag, as in :meth:`Vault.tag`.

        Returns:
            Shard name -> the tagged commit's id.

        Raises:
            VaultExistsError: a shard has the tag on another commit already, or the tag is
                whole and shards joined since (tags never move; the shards are named).
            VaultNotFoundError: the dataset has no shard yet.
        """
        if not self._shards:
            raise VaultNotFoundError(f"{self._where}: the dataset has no shard to tag yet")
        return _tag_shards(self._where, name, {s: self.vault(s) for s in self._shards})

    # ------------------------------------------------------------------------- writing
    def shard(self, name: str | None = None, *, rows: int | None = None) -> Vault:
        """A writer for this process's shard: a :class:`Vault` in mode ``"a"``.

        A new shard is created with the dataset's structure; an existing one is opened for
        appending when its structure matches (its writer lock keeps it to one writer). When
        it closes, the shard's entry goes into the dataset's catalog.

        Args:
            name: the shard's name (default: host, process id and a random part).
            rows: the shard's rows (default for a new shard: those given to
                ``Dataset.create``, else the dataset's; an existing shard keeps its own).

        Returns:
            The shard's vault, open for appending.

        Raises:
            VaultArgumentError: a name that is not 1 to 128 letters, digits, ``.``, ``_`` or
                ``-``; ``rows`` that is not an int >= 1.
            VaultStructureError: an existing shard of another structure, or of other rows
                than ``rows``.
            VaultLockedError: another writer holds the shard.
            VaultModeError: the dataset was opened at a tag.
        """
        if self._tag is not None:
            raise VaultModeError(
                f"{self._where} was opened at tag {self._tag!r}, for reading; open it without "
                "at= (or with Dataset.create(..., exist_ok=True)) to write a shard"
            )
        name = default_shard_name() if name is None else name
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise VaultArgumentError(
                "a shard name is 1 to 128 letters, digits, '.', '_' or '-' (not starting with "
                f"'.', '_' or '-'), got {name!r}"
            )
        rows = None if rows is None else int_arg("rows", rows, 1)
        where = self._where.child(f"{SHARDS}/{name}")
        if where.read(MANIFEST_KEY) is not None:
            vault = self._open_shard(where, name, rows)
        else:
            manifest = shard_manifest(self._template, self._shard_rows if rows is None else rows)
            try:
                vault = vault_of_writer(create_vault(where, manifest))
            except VaultExistsError:
                if where.read(MANIFEST_KEY) is None:
                    raise
                vault = self._open_shard(where, name, rows)  # created meanwhile elsewhere
        vault._after_close = functools.partial(
            shards_io.catalog_closed_shard, self._where, name, self._catalog_key
        )  # its entry in the catalog: the first reader of a finished dataset finds it there
        return vault

    def _open_shard(self, where: Location, name: str, rows: int | None) -> Vault:
        vault = Vault.open(where, mode="a")  # a writer at it: VaultLockedError naming it
        try:
            self._check_shard(name, vault.manifest)
            if rows is not None and rows != vault.rows:
                raise VaultStructureError(
                    f"{self._where}: shard {name!r} exists with {vault.rows} rows, not "
                    f"{rows}: open it without rows=, or name a new shard"
                )
        except BaseException:
            vault.close()
            raise
        return vault

    def _check_shard(self, name: str, manifest: Manifest) -> None:
        problems = structure_problems(self._template, manifest)
        if problems:
            raise VaultStructureError(
                f"{self._where}: shard {name!r} does not match the dataset: " + "; ".join(problems)
            )

    # ------------------------------------------------------------------------- reading
    def refresh(self) -> int:
        """See new shards and new commits; a dataset opened at a tag stays as tagged.

        Returns:
            How many timesteps (all rows) became visible.
        """
        if self._tag is not None:
            return 0
        before = self.timesteps
        names = self._list_names()
        self._shards = shards_io.load(
            self._where, names, self._shards, self._manifests, self._catalog
        )
        return self.timesteps - before

    def _save_catalog(self) -> None:
        """Write the dataset's catalog (``vault/dataset/_catalog.py``) when it would spare
        later readers enough work; after an object's first two writes (open, first table), at
        most once per ``CATALOG_EVERY`` seconds (a reader refreshing in a loop)."""
        shards = list(self._shards.values())
        if not self._write_catalog or self._tag is not None or len(shards) < CATALOG_MIN_SHARDS:
            return
        if self._catalog_writes >= 2 and time.monotonic() - self._catalog_written < CATALOG_EVERY:
            return
        entries = catalog_io.worth_writing(self._catalog, shards)
        if entries is not None:
            self._catalog_written, self._catalog_writes = time.monotonic(), self._catalog_writes + 1
            if catalog_io.write(self._where, entries, self._catalog_key):
                self._catalog = catalog_io.adopt(shards, entries)

    def _list_names(self) -> list[str]:
        names = self._where.child(SHARDS).child_names()
        return [name for name in names if _NAME.fullmatch(name)]

    def episodes(self, include_open: bool = False) -> EpisodeTable:
        """Every shard's episodes in one table, shard by shard, with a ``shard`` column.

        The shards' indexes are read in one batch, checked as each shard's own read checks
        them.

        Args:
            include_open: also every row's open episode, as in :meth:`Vault.episodes`.

        Returns:
            The table.

        Raises:
            VaultReadError: the shards keep no episode index.
        """
        include_open = bool_arg("include_open", include_open)
        if self._template.episodes is None:
            raise VaultReadError(
                f"{self._where} has no episode index: create the dataset with done_leaf=... "
                "(and optionally truncated_leaf=, reward_leaf=) to keep one"
            )
        table = shards_io.episodes(self._where, list(self._shards.values()), include_open)
        self._save_catalog()
        return table

    # ------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close every shard this object opened (writers wait for their pending writes)."""
        for shard in self._shards.values():
            if shard.vault is not None:
                shard.vault.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_catalog(self) -> dict[str, Any]:
        """Check the catalog found at open against the shards it served (``vault verify``).

        Returns:
            ``state`` (``"absent"``, ``"damaged"``, so ignored, or ``"valid"``), ``used`` (the
            shards it served) and ``problems``: each of those whose entry disagrees with the
            shard's own commit record or index (readers would get the catalog's version:
            delete the catalog).
        """
        used, problems = shards_io.audit_catalog(list(self._shards.values()))
        return {"state": self._catalog_found, "used": used, "problems": problems}


def shard_manifest(template: Manifest, rows: int | None) -> Manifest:
    """A new shard's manifest: ``template`` itself (``created`` too: the dataset's), with
    ``rows`` if given: the shards of one dataset share their manifest's bytes, which a reader
    parses once."""
    if rows is None or rows == template.rows:
        return template
    leaves = tuple(
        dataclasses.replace(leaf, chunk=(min(leaf.chunk[0], rows), *leaf.chunk[1:]))
        for leaf in template.leaves
    )
    return dataclasses.replace(template, rows=rows, leaves=leaves)
