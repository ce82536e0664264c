"""What every importer shares: a staged destination vault fed a block of timesteps at a time.

The destination is made through the public :class:`~vault.Vault` API at the location's staging
(``Location.staging``, the mechanism of the derive functions,
:func:`vault.derive._checks.building`): on a local file system it is built under a hidden temporary
name and renamed into place at the end, so an import that fails or is interrupted (Ctrl-C) leaves
nothing at the destination.

Data moves in blocks of whole timesteps of about ``block_bytes`` (raw): one block is read while
the previous one is appended, so memory stays at about two blocks whatever the dataset's size.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from vault._args import callable_arg, int_arg
from vault._errors import VaultArgumentError, VaultDependencyError
from vault.derive._checks import building, refuse_shard_place
from vault.facade._vault import Vault, vault_of_writer
from vault.storage._kinds import LocationLike, parse_location
from vault.write._create import create_vault, plan_manifest, publish_manifest

_log = logging.getLogger(__name__)

BLOCK_BYTES = 64 << 20
MIN_BLOCK_BYTES = 1 << 16
Progress = Callable[[int, int], None]  # (raw bytes imported, total raw bytes)
Episodes = Mapping[str, str | None]


def require(module: str, fmt: str, extra: str) -> Any:
    """Import an optional dependency, or :class:`~vault.VaultDependencyError` naming the extra
    that installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise VaultDependencyError(
            f"the {fmt} converter needs {err.name!r}, which is not installed: "
            f'pip install "rlvault[{extra}]"'
        ) from None


def check_common(block_bytes: int, progress: Progress | None) -> int:
    """The arguments every importer takes, checked before anything is read."""
    callable_arg("progress", progress)
    return int_arg("block_bytes", block_bytes, MIN_BLOCK_BYTES)


@contextlib.contextmanager
def new_vault(
    dest: LocationLike,
    example: Any,
    *,
    rows: int,
    codec: str | None,
    metadata: dict[str, Any],
    episodes: Episodes,
    shard: bool = False,
) -> Iterator[Vault]:
    """A new vault shaped like ``example`` (one timestep) at the staging of ``dest``; it
    appears at ``dest`` when the block ends without an error, else nothing is left there.
    A shard's place in a dataset is refused, unless ``shard`` (the import made that dataset,
    shaped like this vault)."""
    target = parse_location(dest, argument="dest")
    if not shard:
        refuse_shard_place(target)
    roles = {role: episodes.get(role) for role in ("done", "truncated", "reward")}
    manifest = plan_manifest(
        example, rows=rows, codec=codec, level=None, chunk=None, metadata=metadata, episodes=roles
    )
    with building(target) as tmp:
        # the manifest goes last: where the build cannot be renamed into place (a bucket),
        # an interrupted import is then never a vault
        vault = vault_of_writer(create_vault(tmp, manifest, publish=False))
        try:
            yield vault
        except BaseException:
            with contextlib.suppress(Exception):
                vault.close()
            raise
        vault.close()
        publish_manifest(tmp, manifest)


def pump(
    vault: Vault,
    reads: Sequence[Callable[[], Any]],
    sizes: Sequence[int],
    progress: Progress | None,
) -> None:
    """Append what every ``reads[i]()`` returns (a tree of ``[rows, n, ...]`` arrays, ``sizes[i]``
    raw bytes), in order, reading the next block on a helper thread while this one is
    appended; ``progress(bytes done, total)`` after every block."""
    total = sum(sizes)
    if progress:
        progress(0, total)
    if not reads:
        return
    done = 0
    with ThreadPoolExecutor(1, thread_name_prefix="vault-import") as pool:
        ahead = pool.submit(reads[0])
        try:
            for i, size in enumerate(sizes):
                data = ahead.result()
                if i + 1 < len(reads):
                    ahead = pool.submit(reads[i + 1])
                vault.append(data)
                del data
                done += size
                if progress:
                    progress(done, total)
        except BaseException:
            ahead.cancel()
            raise
    _log.debug("imported %d blocks (%d bytes) into %s", len(reads), total, vault.location)


def pump_stream(
    vault: Vault,
    blocks: Iterator[tuple[Any, int]],
    total: int,
    progress: Progress | None,
    done: int = 0,
) -> int:
    """:func:`pump` for a source read as a stream whose block sizes are known only once read:
    ``blocks`` yields (a tree of ``[rows, n, ...]`` arrays, or None for nothing to append,
    its size in ``total``'s units);
    the next one is read on a helper thread while this one is appended. ``done`` starts the
    count (several streams, one progress); returns the count at the end."""
    sentinel = object()
    with ThreadPoolExecutor(1, thread_name_prefix="vault-import") as pool:
        ahead = pool.submit(next, blocks, sentinel)
        try:
            while True:
                item: Any = ahead.result()
                if item is sentinel:
                    break
                ahead = pool.submit(next, blocks, sentinel)
                data, size = item
                if data is not None:
                    vault.append(data)
                del data, item
                done += size
                if progress:
                    progress(done, total)
        except BaseException:
            ahead.cancel()
            raise
    return done


def time_blocks(
    read: Callable[[int, int], Any], length: int, step_bytes: int, block_bytes: int
) -> tuple[list[Callable[[], Any]], list[int]]:
    """``pump``'s reads and sizes for ``read(t0, t1)`` over ``[0, length)`` in blocks of whole
    timesteps of about ``block_bytes``."""
    per = max(1, block_bytes // max(1, step_bytes))
    edges = [(t0, min(length, t0 + per)) for t0 in range(0, length, per)]
    return [functools.partial(read, a, b) for a, b in edges], [
        (b - a) * step_bytes for a, b in edges
    ]


def listing(message: str, problems: list[str]) -> str:
    """``message`` followed by one indented line per problem (every bad leaf is named)."""
    return message + "".join(f"\n  - {p}" for p in problems)


@contextlib.contextmanager
def opened(source: LocationLike | Vault) -> Iterator[Vault]:
    """``source`` as an open vault: a :class:`Vault` as it is, a location opened for reading
    (and closed on leaving)."""
    if isinstance(source, Vault):
        yield source
        return
    if type(source).__name__ == "Dataset":  # not imported here: the dataset layer is above
        raise VaultArgumentError(
            f"{source} is a dataset of shards; an export takes one vault: a shard "
            "(Vault.open(<root>/shards/NAME)), or every shard's episodes gathered into one "
            "vault first (vault.derive_episodes / `vault subsample ROOT --out VAULT`)"
        )
    vault = Vault.open(source)
    try:
        yield vault
    finally:
        vault.close()


def plain_json(value: Any) -> Any:
    """``value`` as strict JSON, for metadata a source format wrote that a vault's JSON cannot
    hold: NaN and infinities as strings (``"-inf"``), sets as sorted lists, anything else
    unknown as a string."""
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain_json(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, np.generic):
        return plain_json(value.item())
    return str(value)
