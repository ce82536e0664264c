"""Pinned versions: commit ids, the commit history, tags and content fingerprints.

Every commit record carries its number (``seq``) and a random ``uid``; ``"<seq>-<uid>"`` is
the commit's id (:func:`commit_id`), unique across copies that were written separately and
across rewrites of a location. Committed data is never rewritten in place (an append only
adds timesteps after the committed length), so a commit's data stays readable after any
number of later appends: a snapshot at an old commit record reads exactly that commit's data.

* **History.** Each append writes the record it is about to replace to ``history/<seq>``
  (in parallel with its data, so it costs no latency), so every commit but the latest (which
  is the commit record itself) can be found by its number.
* **Tags** are ``refs/<name>`` objects naming a commit id, created only if absent (a
  conditional write): a tag never moves.
* **Fingerprints** name the content of a commit: a SHA-256 over the structure, the committed
  length, the episode count and seams, the stored crc32c of every complete chunk in the
  committed range (four bytes read per chunk, not the chunk), and the bytes of the committed
  part of each array's last, partly filled chunk. A byte-for-byte copy has the same
  fingerprint; any changed committed value changes it. (In format 3 and older, of a leaf whose
  chunks cut its item axes only the first item chunk of each place is covered, as those
  versions defined it: ``vault/format/_tags.py``.)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import re
from typing import Any

import numpy as np

from vault._errors import VaultArgumentError, VaultCorruptError, VaultExistsError, VaultPinError
from vault.commits._gate import gate
from vault.commits._snapshot import Snapshot, at_commit
from vault.format._records import (
    BOUNDS,
    HISTORY,
    REFS,
    RETURNS,
    ZARR_JSON,
    CommitRecord,
    group_json,
    read_commit_bytes,
)
from vault.storage._location import ABSENT

Pin = int | str
"""A commit number, a commit id (``"12-3f9a0c1b2d4e"``) or a tag name."""

_ID = re.compile(r"(\d+)(?:-([0-9a-f]{4,64}))?")  # (fullmatch: "$" allows a final "\n")
_TAG = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,99}")


def commit_id(commit: CommitRecord) -> str:
    """The id of ``commit``: ``"<seq>-<uid>"`` (just ``"<seq>"`` for records written before
    commits had uids)."""
    return f"{commit.seq}-{commit.uid}" if commit.uid else str(commit.seq)


def history_key(seq: int) -> str:
    return f"{HISTORY}/{seq}"


def at_pin(snap: Snapshot, pin: Pin) -> Snapshot:
    """``snap`` (the vault's latest commit) moved back to the commit ``pin`` names; a pin the
    vault cannot serve is :class:`VaultPinError` naming it."""
    seq, uid, shown = _parse(snap, pin)
    latest = snap.commit
    if seq == latest.seq:
        record = latest
    elif seq > latest.seq:
        raise VaultPinError(
            f"{snap.where}: no commit {shown}: the latest commit is {commit_id(latest)}"
        )
    else:
        raw = snap.location.read(history_key(seq))
        if raw is None:
            raise VaultPinError(
                f"{snap.where}: commit {shown} cannot be served: its record is not in the "
                "vault's history (the vault was rewritten, or that commit was made by an "
                "rlvault without pins)"
            )
        record = read_commit_bytes(raw, f"{snap.where} ({history_key(seq)})", snap.manifest)
        if record.seq != seq:
            raise VaultCorruptError(
                f"{snap.where}: {history_key(seq)} holds commit {record.seq}, not {seq}"
            )
    if (
        uid is not None
        and record.uid is not None
        and record.uid.startswith(uid)
        and record.uid != uid
    ):
        raise VaultPinError(
            f"{snap.where}: commit {shown} is a shortened id; a commit id names the whole "
            f"uid (so that it never matches a rewritten vault's commit): {commit_id(record)}"
        )
    if uid is not None and record.uid != uid:
        raise VaultPinError(
            f"{snap.where}: commit {shown} is not this vault's commit {commit_id(record)}: "
            "the vault at this location was rewritten or replaced since the pin was taken, "
            "so the pinned data is gone (never read as different data)"
        )
    if record.committed_length > latest.committed_length:
        raise VaultCorruptError(
            f"{snap.where}: commit {commit_id(record)} holds {record.committed_length} "
            f"timesteps, more than the latest ({latest.committed_length})"
        )
    return at_commit(snap, record)


def _parse(snap: Snapshot, pin: Pin) -> tuple[int, str | None, str]:
    if isinstance(pin, np.integer) and not isinstance(pin, np.bool_):
        pin = int(pin)  # a commit number from numpy (a Grain record's, a table's)
    if isinstance(pin, bool) or not isinstance(pin, (int, str)):
        raise VaultArgumentError(
            f"at must be a commit number, a commit id or a tag name, got {type(pin).__name__}"
        )
    if isinstance(pin, int):
        if pin < 0:
            raise VaultArgumentError(f"at must be a commit number >= 0, got {pin}")
        return pin, None, str(pin)
    found = _ID.fullmatch(pin)
    if found:
        return int(found.group(1)), found.group(2), repr(pin)
    if not _is_tag_name(pin):
        raise VaultArgumentError(
            f"{snap.where}: at={pin!r} is neither a commit id of this vault nor a valid tag "
            "name. A commit id is '<number>-<uid>' (the uid: 4-64 lowercase hex digits) or "
            f"just the number, such as {commit_id(snap.commit)!r} (the latest commit); a tag "
            f"name is {_TAG_RULE}, such as 'baseline'"
        )
    target = read_tag(snap, pin)
    found = _ID.fullmatch(target)
    if not found:
        raise VaultCorruptError(f"{snap.where}: tag {pin!r} names {target!r}, not a commit id")
    return int(found.group(1)), found.group(2), f"{target!r} (tag {pin!r})"


# ----------------------------------------------------------------------------------- tags
_TAG_RULE = "1-100 letters, digits, '.', '_' or '-', starting with a letter or '_'"
_TAG_KEPT = "in any letter case, neither 'zarr.json' nor ending in '.__lock' (the store's own)"


def _is_tag_name(name: Any) -> bool:
    """Whether ``name`` is a tag's name (format section 4.7): ``zarr.json`` is the ``refs/``
    group's record and a key ending in ``.__lock`` is TensorStore's lock file of a key, in any
    letter case, since a case-insensitive file system takes ``ZARR.JSON`` for ``zarr.json``."""
    if not isinstance(name, str) or not _TAG.fullmatch(name):
        return False
    folded = name.lower()
    return folded != ZARR_JSON and not folded.endswith(".__lock")


def check_tag_name(name: Any) -> str:
    if not _is_tag_name(name):
        raise VaultArgumentError(
            f"a tag name is {_TAG_RULE} (so that it never looks like a commit id), and "
            f"{_TAG_KEPT}; got {name!r}"
        )
    return name


def read_tag(snap: Snapshot, name: str) -> str:
    check_tag_name(name)
    raw = snap.location.read(f"{REFS}/{name}")
    if raw is None:
        known = ", ".join(sorted(list_tags(snap))) or "none"
        raise VaultPinError(
            f"{snap.where}: no tag {name!r} (tags: {known}); a commit is named by its id, such "
            f"as {commit_id(snap.commit)!r} (the latest commit)"
        )
    return tag_commit(raw, snap.where, name)


def tag_commit(raw: bytes, where: object, name: str) -> str:
    """The commit id a tag's record ``raw`` names (:class:`VaultCorruptError` if malformed)."""
    try:
        doc = json.loads(raw)
        return str(doc["commit"])
    except (ValueError, KeyError, TypeError) as err:
        raise VaultCorruptError(f"{where}: tag {name!r} is malformed ({err})") from None


def list_tags(snap: Snapshot) -> dict[str, str]:
    """Every tag: name -> commit id."""
    import tensorstore as ts

    kv = snap.location.kvstore()
    with snap.location.failures("list the tags"):
        keys = kv.list(ts.KvStore.KeyRange(f"{REFS}/", f"{REFS}0")).result()
    out = {}
    for key in sorted(bytes(k).decode() for k in keys):
        name = key[len(REFS) + 1 :]
        if _is_tag_name(name):  # not refs/zarr.json, the folder's group
            out[name] = read_tag(snap, name)
    return out


def create_tag(snap: Snapshot, name: str, dataset_shards: int | None = None) -> str:
    """Name ``snap``'s commit ``name``; a tag that exists is never moved
    (:class:`VaultExistsError`). Returns the commit id. ``dataset_shards``: for a shard of a
    dataset's tag, how many shards that tag names (a reader can then tell an interrupted
    dataset tag from a whole one)."""
    check_tag_name(name)
    target = commit_id(snap.commit)
    doc: dict[str, Any] = {
        "commit": target,
        "committed_length": snap.length,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    if dataset_shards is not None:
        doc["dataset_shards"] = dataset_shards
    kv = snap.location.kvstore()
    with snap.location.failures("write the tag"):
        snap.location.drop_stale_temp(f"{REFS}/{name}")  # a killed tagger's, reused otherwise
        # refs/ is an empty Zarr group, so that zarr-python lists the hierarchy
        kv.write(f"{REFS}/{ZARR_JSON}", group_json(), if_equal=ABSENT).result()
        written = kv.write(f"{REFS}/{name}", json.dumps(doc).encode(), if_equal=ABSENT).result()
    if not written.generation:
        existing = read_tag(snap, name)
        if existing == target:
            return target  # the same tag again: nothing moves
        raise VaultExistsError(
            f"{snap.where}: tag {name!r} already names commit {existing}; tags never move "
            "(choose another name)"
        )
    return target


# ---------------------------------------------------------------------------- fingerprint
TAIL_BATCH = 4096  # chunks whose stored checksums are read together for a fingerprint


class StoredContent:
    """What the fingerprints of several commits of one vault read, each read once: the
    stored checksums of complete chunks, and per array the committed data of its last partly
    filled chunk (committed data is never rewritten, so a later commit's data holds an
    earlier one's). For commits visited from the latest back."""

    def __init__(self) -> None:
        self.tails: dict[str, bytes | None] = {}
        self.edges: dict[str, tuple[int, np.ndarray]] = {}  # key -> (start, data from start)

    def tails_of(self, snap: Snapshot, keys: list[str]) -> list[bytes | None]:
        unread = [k for k in keys if k not in self.tails]
        if unread:
            self.tails.update(zip(unread, snap.location.read_tails(unread), strict=True))
        return [self.tails[k] for k in keys]

    def edge(self, snap: Snapshot, key: str, start: int, stop: int) -> np.ndarray:
        axis = 0 if key in (BOUNDS, RETURNS) else 1
        known = self.edges.get(key)
        if known is None or known[0] != start or known[1].shape[axis] < stop - start:
            known = (start, _edge(snap, key, start))
            self.edges[key] = known
        return known[1][:, : stop - start] if axis else known[1][: stop - start]


def fingerprint(snap: Snapshot, stored: StoredContent | None = None) -> str:
    """The content fingerprint of ``snap``'s commit (see the module docstring); ``stored``:
    what earlier calls for later commits of the same vault read."""
    digest = hashlib.sha256()
    manifest = snap.manifest
    head = {
        "rows": manifest.rows,
        "structure": manifest.structure,
        "leaves": [
            [leaf.name, leaf.dtype, list(leaf.shape), list(leaf.chunk), leaf.codecs]
            for leaf in manifest.leaves
        ],
        "episodes": None if manifest.episodes is None else manifest.episodes.as_dict(),
        "committed_length": snap.length,
        "episode_count": snap.episode_count,
        "seams": [[s.at, s.lost] for s in snap.commit.seams],
    }
    digest.update(json.dumps(head, sort_keys=True, default=str).encode())
    for key, grid in snap.grids.items():
        length = snap.episode_count if key in (BOUNDS, RETURNS) else snap.length
        complete = length // grid.step
        todo = (  # format 4: every item chunk; before, the first of each place only
            chunk
            for k in range(complete)
            for b in range(grid.row_blocks)
            for chunk in grid.bound_chunks(b, k)
        )
        digest.update(key.encode())
        # a batch at a time: a claimed length costs only the chunks up to the first missing
        while keys := list(itertools.islice(todo, TAIL_BATCH)):
            tails = (
                snap.location.read_tails(keys) if stored is None else stored.tails_of(snap, keys)
            )
            missing = [k for k, t in zip(keys, tails, strict=True) if t is None or len(t) < 4]
            if missing:
                raise VaultCorruptError(
                    f"{snap.where}: array {key}: chunk {missing[0]} is missing"
                    + (f" (and {len(missing) - 1} more near it)" if len(missing) > 1 else "")
                    + f". Run `vault verify {snap.where}`."
                )
            digest.update(b"".join(t for t in tails if t is not None))
        if length % grid.step:
            start = complete * grid.step
            if stored is None:
                edge = _edge(snap, key, start)
            else:
                edge = stored.edge(snap, key, start, length)
            digest.update(np.ascontiguousarray(edge).data)
    return f"sha256:{digest.hexdigest()}"


def commit_with_fingerprint(snap: Snapshot, expected: str) -> tuple[Snapshot | None, int]:
    """The commit of this vault, from ``snap`` (the latest) back, whose data has fingerprint
    ``expected``: (its snapshot, its number), or (None, the oldest number looked at): 0 when
    every commit was, more when the records of older ones are not in the history. Every
    chunk is read at most once (:class:`StoredContent`)."""
    stored = StoredContent()
    seq = snap.commit.seq
    while True:
        at = snap if seq == snap.commit.seq else None
        if at is None:
            try:
                at = at_pin(snap, seq)
            except VaultPinError:
                return None, seq + 1  # older records are not kept (an earlier rlvault)
        if fingerprint(at, stored) == expected:
            return at, seq
        if seq == 0:
            return None, 0
        seq -= 1


def _edge(snap: Snapshot, key: str, start: int) -> np.ndarray:
    """The committed part of array ``key``'s last, partly filled chunk, as stored (decoded,
    each chunk's own checksum checked, not compared with what the commit recorded: the
    fingerprint says what is there)."""
    from vault.commits._snapshot import result

    group, name = key.split("/", 1)
    if key in (BOUNDS, RETURNS):
        gate(snap, key, None, start, snap.episode_count)
        region = snap.index[0 if key == BOUNDS else 1][start : snap.episode_count]
    else:
        gate(snap, key, None, start, snap.length)
        region = snap.array(name)[:, start : snap.length]
    return np.asarray(result(snap, region.read(), name, group))


# --------------------------------------------------------------------------------- verify
def snapshot_for_check(
    location: Any, manifest: Any, pin: Pin | None, expected: str | None = None
) -> tuple[Snapshot | None, str | None, str | None]:
    """``verify``'s snapshot at ``pin`` (None: the latest; with fingerprint ``expected`` and
    no pin: :func:`snapshot_with_fingerprint`), or None and why it cannot be opened; then a
    note that the vault has grown since ``expected``, if so. A pin the vault cannot serve
    raises :class:`VaultPinError`."""
    from vault._errors import VaultError
    from vault.commits._snapshot import load_snapshot

    try:
        snap = load_snapshot(location, writable=False, manifest=manifest)
    except VaultError as err:
        why = f"the vault cannot be opened to check a pin: {str(err).splitlines()[0]}"
        return None, why, None
    if pin is not None:
        return at_pin(snap, pin), None, None
    if expected is not None:
        found, grown = snapshot_with_fingerprint(snap, expected)
        return found, None, grown
    return snap, None, None


def snapshot_with_fingerprint(snap: Snapshot, expected: str) -> tuple[Snapshot, str | None]:
    """``verify``'s snapshot for a fingerprint given without a pin (growth is not a
    difference): the commit with that fingerprint, from ``snap`` (the latest) back, and a
    note when it is not the latest (the vault has grown since). None of them: ``snap`` (its
    data differs: :func:`fingerprint_problem` says so); :class:`VaultPinError` when the
    search cannot tell (older commits' records are not in the history)."""
    from vault._errors import VaultError

    try:
        found, oldest = commit_with_fingerprint(snap, expected)
    except VaultError:
        return snap, None  # (a missing chunk: fingerprint_problem names it)
    if found is not None:
        if found.commit.seq == snap.commit.seq:
            return found, None
        return found, (
            f"the vault has grown since fingerprint {expected}: it is commit "
            f"{commit_id(found.commit)}'s ({found.length} timesteps), and the latest is "
            f"{commit_id(snap.commit)} ({snap.length} timesteps); commit "
            f"{commit_id(found.commit)} was checked"
        )
    if oldest > 0:
        raise VaultPinError(
            f"{snap.where}: no commit from {oldest} to the latest ({commit_id(snap.commit)}) "
            f"has fingerprint {expected}, and the records of older commits are not in the "
            f"history (an earlier rlvault wrote them): the vault has grown since {expected}, "
            "or its data differs. Pass --at PIN (at=PIN: the commit id or tag the fingerprint "
            "was taken at) to check that commit"
        )
    return snap, None


FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")


def check_fingerprint(value: Any, what: str = "fingerprint") -> str:
    """``value`` if it is a content fingerprint as :func:`fingerprint` makes them
    (``sha256:`` and 64 lowercase hex digits), else a ``VaultArgumentError`` naming ``what``."""
    if not isinstance(value, str) or FINGERPRINT.fullmatch(value) is None:
        raise VaultArgumentError(
            f"{what} must be a content fingerprint as `vault info --json` or "
            f"Vault.fingerprint() give it ('sha256:' and 64 hex digits), got {value!r}"
        )
    return value


def fingerprint_problem(snap: Snapshot | None, expected: str, searched: bool = False) -> str | None:
    """Why ``snap``'s data does not have fingerprint ``expected`` (None: it has).
    ``searched``: no earlier commit has it either."""
    from vault._errors import VaultError

    if snap is None:
        return f"cannot be computed (expected {expected})"
    try:
        got = fingerprint(snap)
    except VaultError as err:
        return f"cannot be computed: {str(err).splitlines()[0]}"
    if got == expected:
        return None
    earlier = ", nor does any earlier commit" if searched else ""
    return (
        f"commit {commit_id(snap.commit)} has fingerprint {got}, expected {expected}{earlier}: "
        "its data differs from the fingerprinted data (the chunk problems name the arrays and "
        "time ranges; none listed: another vault or version)"
    )
