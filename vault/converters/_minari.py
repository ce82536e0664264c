"""Minari datasets <-> vault (needs ``minari`` with its HDF5 or Arrow backend:
``pip install "rlvault[minari]"``).

**The T+1 observation convention.** A Minari episode of ``T`` steps holds ``T + 1``
observations (the one after the last action included) and ``T`` actions, rewards,
terminations and truncations. A vault stores timesteps, so an imported episode is ``T``
timesteps, each with ``observations`` (before the action) and ``next_observations`` (after
it: ``next_observations[t] == observations[t + 1]``, and the last one is the episode's final
observation), ``actions``, ``rewards``, ``terminations`` and ``truncations``. Dict and Tuple
spaces become nested leaves (``observations/<key>``, ``observations/0``). Nothing is lost; the
price is that observations are stored twice. Exporting does the reverse: the ``T + 1``
observations of an episode are its ``observations`` followed by its last ``next_observations``.

**Import.** Every episode, in order, is appended to one row; the episode index uses
``terminations`` as the done leaf, ``truncations`` as the truncated leaf and ``rewards`` as
the reward leaf, so the vault's episodes are the dataset's. An episode that ends with neither
flag set (Minari's ``DataCollector`` never writes one, but other writers may) is marked
truncated at its last step, as the ``DataCollector`` does (and logged). The vault's metadata
records, under ``imported_from``, the dataset's id, its spaces (Minari's serialisation, which
an export uses again) and its metadata. Episode ``infos``, seeds and options are not
imported.

**Export.** The complete episodes of a vault with an episode index become a Minari dataset
(``minari.load_dataset(dataset_id)`` opens it) in Minari's datasets directory
(``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``) or under ``root``, built under a hidden
name and renamed into place. Spaces are the ones given, else recorded by an import, else
inferred (``Box`` of each leaf's shape and dtype, unbounded for floats; ``Dict``/``Tuple`` for
nested leaves). The dataset's metadata is what an import recorded (``env_spec``, so that
``recover_environment()`` works, ``eval_env_spec``, ``algorithm_name``, ``author``,
``author_email``, ``code_permalink``, ``description``, ``requirements``, reference scores and
any other key), updated by the ``env_spec`` and ``metadata`` arguments; the keys that describe
the new files (``dataset_id``, ``total_episodes``, ``total_steps``, ``dataset_size``,
``data_format``, ``jpeg_encoding``, ``minari_version``, the spaces) are the export's own.
Images are stored raw (Minari's lossy JPEG encoding is off).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vault._args import kind, path_arg, str_arg
from vault._errors import (
    VaultArgumentError,
    VaultCorruptError,
    VaultExistsError,
    VaultNotFoundError,
    VaultReadError,
    VaultStructureError,
)
from vault.converters._minari_trees import (
    drops_next,
    named,
    plain,
    space_of,
    space_problems,
    subtree,
    tree_leaves,
    tree_map,
    unlike,
)
from vault.converters._sink import (
    BLOCK_BYTES,
    Progress,
    check_common,
    new_vault,
    opened,
    plain_json,
    pump,
    require,
)
from vault.facade._vault import Vault
from vault.storage._file import held_folder, sweep_partials
from vault.storage._kinds import LocationLike

_log = logging.getLogger(__name__)

DATA_DIR = "data"
FORMATS = ("hdf5", "arrow")
FIELDS = ("observations", "next_observations", "actions", "rewards", "terminations", "truncations")


# -------------------------------------------------------------------------------- import
def import_minari(
    source: str | os.PathLike[str],
    dest: LocationLike,
    *,
    codec: str | None = "auto",
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Vault:
    """Import a Minari dataset as a new one-row vault with an episode index.

    Episodes are read a few at a time. Nothing is left at ``dest`` if the import fails or is
    interrupted.

    Args:
        source: a dataset id (``"cartpole/random-v0"``, looked up in Minari's datasets
            directory) or the path of a dataset's directory (the one holding ``data/``).
        dest: the new vault's location; it must not exist.
        codec: the new vault's codec, as in :meth:`vault.Vault.create`.
        block_bytes: the raw bytes read at a time (memory stays about two blocks).
        progress: called as ``progress(bytes imported, total bytes)`` after every block.

    Returns:
        The new vault, opened read-only.

    Raises:
        VaultNotFoundError: no such dataset.
        VaultCorruptError: episodes Minari cannot read, or of different structures.
        VaultDependencyError: minari is missing (``pip install "rlvault[minari]"``).
        VaultExistsError: something is at ``dest`` already.
    """
    block_bytes = check_common(block_bytes, progress)
    require("minari", "minari", "minari")
    from minari.dataset.minari_storage import MinariStorage
    from minari.serialization import serialize_space

    data_path = _data_path(source)
    try:
        storage = MinariStorage.read(data_path)
    except (ValueError, KeyError, AssertionError) as err:
        raise VaultCorruptError(
            f"{data_path}: not a Minari dataset Minari can read ({err})"
        ) from None
    odd = _unsupported(storage.observation_space, "observations") + _unsupported(
        storage.action_space, "actions"
    )
    if odd:
        raise VaultStructureError(
            f"{data_path}: spaces whose values are not arrays of numbers cannot be imported "
            "(a vault leaf is one): convert those fields, or export the dataset without them",
            odd,
        )
    count = int(storage.total_episodes)
    if count == 0:
        raise VaultReadError(f"{data_path}: the Minari dataset has no episodes; nothing to import")
    first = _timesteps(next(iter(storage.get_episodes([0]))), data_path, 0)[0]
    example = tree_map(lambda x: np.zeros(x.shape[2:], x.dtype), first)
    step = sum(math.prod(x.shape[2:]) * x.dtype.itemsize for x in tree_leaves(first))
    lengths = [int(m.get("total_steps", 0)) for m in storage.get_episode_metadata(range(count))]
    groups = _groups(lengths, step, block_bytes)
    marked = [0]

    def read(episodes: list[int]) -> Any:
        parts = []
        for i, episode in zip(episodes, storage.get_episodes(episodes), strict=True):
            tree, forced = _timesteps(episode, data_path, i)
            _check_like(tree, first, data_path, i)
            marked[0] += forced
            parts.append(tree)
        return tree_map(lambda *xs: np.concatenate(xs, axis=1), *parts)

    raw = storage.metadata
    metadata = {
        "imported_from": {
            "format": "minari",
            "source": str(data_path.parent),
            "dataset_id": raw.get("dataset_id"),
            "data_format": raw.get("data_format"),
            "episodes": count,
            "observation_space": serialize_space(storage.observation_space),
            "action_space": serialize_space(storage.action_space),
            "metadata": plain_json(
                {k: v for k, v in raw.items() if k not in ("observation_space", "action_space")}
            ),
        }
    }
    roles = {"done": "terminations", "truncated": "truncations", "reward": "rewards"}
    reads = [_bind(read, g) for g in groups]
    sizes = [sum(lengths[i] for i in g) * step for g in groups]
    with new_vault(dest, example, rows=1, codec=codec, metadata=metadata, episodes=roles) as out:
        pump(out, reads, sizes, progress)
    if marked[0]:
        _log.info("%s: %d episodes had no end flag; marked truncated", data_path, marked[0])
    return Vault.open(dest)


def _bind(read: Callable[[list[int]], Any], group: list[int]) -> Callable[[], Any]:
    return lambda: read(group)


def _data_path(source: str | os.PathLike[str]) -> Path:
    text = path_arg("source", source, "a Minari dataset folder")
    path = Path(text).expanduser()
    if path.is_dir():
        data = path / DATA_DIR if (path / DATA_DIR).is_dir() else path
    else:
        data = datasets_root() / text / DATA_DIR
    if not (data / "metadata.json").is_file():
        raise VaultNotFoundError(
            f"{text}: expected a Minari dataset (a dataset id under {datasets_root()}, or a "
            f"dataset directory holding {DATA_DIR}/metadata.json), got "
            + ("a directory without one" if path.is_dir() else "neither")
        )
    return data.absolute()


def datasets_root() -> Path:
    """Returns Minari's datasets directory: ``MINARI_DATASETS_PATH`` or ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _timesteps(episode: dict[str, Any], where: Path, index: int) -> tuple[dict[str, Any], int]:
    """One episode as vault timesteps ``[1, T, ...]`` (see the module docstring), and 1 when
    its last step had to be marked truncated."""
    obs = episode["observations"]
    steps = len(np.asarray(episode["rewards"]))
    problems = [
        f"episode {index}: observations/{name}: expected {steps + 1} observations (one more "
        f"than its {steps} steps), got {len(x)}"
        for name, x in named(obs)
        if len(x) != steps + 1
    ]
    problems += [
        f"episode {index}: actions/{name}: expected {steps} actions, got {len(x)}"
        for name, x in named(episode["actions"])
        if len(x) != steps
    ]
    terminations = np.asarray(episode["terminations"]).astype(bool).copy()
    truncations = np.asarray(episode["truncations"]).astype(bool).copy()
    problems += [
        f"episode {index}: {name}: set at step {int(np.flatnonzero(flags[:-1])[0])} of "
        f"{steps}, before its last (the vault would split the episode there)"
        for name, flags in (("terminations", terminations), ("truncations", truncations))
        if flags[:-1].any()
    ]
    if problems:
        raise VaultStructureError(f"{where}: an episode that cannot be imported", problems)
    forced = 0
    if steps and not (terminations[-1] or truncations[-1]):
        truncations[-1], forced = True, 1
    tree = {
        "observations": tree_map(lambda x: np.asarray(x)[:-1], obs),
        "next_observations": tree_map(lambda x: np.asarray(x)[1:], obs),
        "actions": tree_map(np.asarray, episode["actions"]),
        "rewards": np.asarray(episode["rewards"]),
        "terminations": terminations,
        "truncations": truncations,
    }
    return tree_map(lambda x: x[None], tree), forced


def _check_like(tree: Any, first: Any, where: Path, index: int) -> None:
    problems = [
        f"episode {index}: {name}: expected [T, {', '.join(map(str, a.shape[2:]))}] {a.dtype} "
        f"(as episode 0), got {list(b.shape[1:])} {b.dtype}"
        for (name, a), (_, b) in zip(named(first), named(tree), strict=True)
        if a.shape[2:] != b.shape[2:] or a.dtype != b.dtype
    ]
    if problems:
        raise VaultStructureError(f"{where}: episodes of different shapes", problems)


def _unsupported(space: Any, path: str) -> list[str]:
    """The leaves of a Gymnasium space whose values are not numeric arrays (``Text``,
    ``Graph``, ``Sequence``, ...), each named by its leaf path and space."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return [p for key, sub in space.spaces.items() for p in _unsupported(sub, f"{path}/{key}")]
    if isinstance(space, spaces.Tuple):
        return [p for i, sub in enumerate(space.spaces) for p in _unsupported(sub, f"{path}/{i}")]
    numeric = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    return [] if space is None or isinstance(space, numeric) else [f"{path}: {space}"]


def _groups(lengths: list[int], step: int, block_bytes: int) -> list[list[int]]:
    """Consecutive episodes in groups of about ``block_bytes`` (at least one each)."""
    groups: list[list[int]] = []
    size = 0
    for i, n in enumerate(lengths):
        if not groups or size + n * step > block_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n * step
    return groups


# -------------------------------------------------------------------------------- export
def export_minari(
    source: LocationLike | Vault,
    dataset_id: str,
    *,
    root: str | os.PathLike[str] | None = None,
    data_format: str = "hdf5",
    observations: str = "observations",
    next_observations: str = "next_observations",
    actions: str = "actions",
    rewards: str | None = None,
    terminations: str | None = None,
    truncations: str | None = None,
    observation_space: Any = None,
    action_space: Any = None,
    env_spec: Any = None,
    metadata: dict[str, Any] | None = None,
    block_bytes: int = BLOCK_BYTES,
    progress: Progress | None = None,
) -> Path:
    """Export the complete episodes of a vault as a Minari dataset.

    Complete means ended and whole: the open last episode of each row is left out, and so is
    an episode whose beginning was lost (one that starts at a seam, ``start_known`` false in
    :meth:`~vault.Vault.episodes`).

    The dataset appears whole or not at all. Each Minari field is a leaf path (or a
    subtree, for Dict/Tuple spaces); the defaults are the names an import gives them.

    Args:
        source: a vault with an episode index, or its location.
        dataset_id: the Minari dataset id (``"namespace/name-v0"``).
        root: the datasets directory (default: Minari's, see :func:`datasets_root`).
        data_format: ``"hdf5"`` or ``"arrow"``.
        observations: the observations' leaf path.
        next_observations: the next observations' leaf path, where the vault has one.
        actions: the actions' leaf path.
        rewards: the rewards' leaf path (default: the vault's reward leaf).
        terminations: the terminations' leaf path (default: the vault's done leaf).
        truncations: the truncations' leaf path (default: the vault's truncated leaf; none:
            all false).
        observation_space: the Gymnasium observation space (default: the one recorded at
            import, else one inferred from the leaves).
        action_space: the Gymnasium action space (likewise).
        env_spec: a Gymnasium ``EnvSpec``, its JSON, or an environment id; replaces the one an
            import recorded (so that ``recover_environment()`` works).
        metadata: Minari metadata keys (``algorithm_name``, ``author``, ...); replace what an
            import recorded.
        block_bytes: the raw bytes read at a time.
        progress: called as ``progress(bytes exported, total bytes)``.

    Returns:
        The new dataset's directory.

    Raises:
        VaultArgumentError: an unknown ``data_format``, a malformed ``dataset_id``, or no
            ``next_observations`` (a Minari episode holds the observation after its last
            step).
        VaultReadError: a vault without an episode index, or without complete episodes.
        VaultStructureError: leaves the Minari fields need that the vault lacks.
        VaultExistsError: the dataset exists already.
        VaultDependencyError: minari is missing (``pip install "rlvault[minari]"``).
    """
    block_bytes = check_common(block_bytes, progress)
    if not isinstance(data_format, str) or data_format not in FORMATS:
        raise VaultArgumentError(f"data_format must be one of {list(FORMATS)}, got {data_format!r}")
    for arg, leaf, optional in (
        ("observations", observations, False),
        ("next_observations", next_observations, False),
        ("actions", actions, False),
        ("rewards", rewards, True),
        ("terminations", terminations, True),
        ("truncations", truncations, True),
    ):
        str_arg(arg, leaf, optional)
    if root is not None:
        root = path_arg("root", root, "a folder")
    for arg, given in (("observation_space", observation_space), ("action_space", action_space)):
        if given is not None and not hasattr(given, "contains"):  # not a Gymnasium space
            raise VaultArgumentError(f"{arg} must be a Gymnasium space or None, got {kind(given)}")
    minari = require("minari", "minari", "minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.dataset.minari_storage import MinariStorage

    if not next_observations:
        raise VaultArgumentError(
            "next_observations: a Minari episode holds one observation more than its steps "
            "(the one after the last step), which only a next-observations leaf gives; got "
            f"{next_observations!r}"
        )
    shape = "(namespace/)name-vN, e.g. 'cartpole/expert-v0'"
    if not isinstance(dataset_id, str) or not re.search(r"-v\d+$", dataset_id):
        raise VaultArgumentError(f"dataset_id {dataset_id!r}: expected {shape}")
    try:
        namespace = parse_dataset_id(dataset_id)[0]
    except (ValueError, TypeError) as err:
        raise VaultArgumentError(f"dataset_id {dataset_id!r}: expected {shape} ({err})") from None
    with opened(source) as vault:
        if not vault.has_episodes:
            raise VaultReadError(
                f"{vault.location} has no episode index: a Minari dataset is made of episodes "
                "(create the vault with done_leaf=..., or import with --done)"
            )
        roles = vault.episode_leaves
        fields = {
            "observations": observations,
            "next_observations": next_observations,
            "actions": actions,
            "rewards": rewards or roles["reward"] or "rewards",
            "terminations": terminations or roles["done"],
            "truncations": truncations or roles["truncated"],
        }
        example = plain(vault.read_numpy(start=0, stop=0))
        missing = [
            f"{field}: no leaf or subtree {path!r} in the vault; leaves: {vault.leaf_names}"
            for field, path in fields.items()
            if path is not None and subtree(example, path) is None
        ]
        missing += unlike(example, observations, next_observations)
        if missing:
            raise VaultStructureError(f"{vault.location}: cannot export as Minari", missing)
        info = _export_metadata(vault, env_spec, metadata)
        obs_space = observation_space or _recorded(vault, "observation_space")
        act_space = action_space or _recorded(vault, "action_space")
        obs_space = obs_space or space_of(subtree(example, observations))
        act_space = act_space or space_of(subtree(example, actions))
        for arg, space, path in (
            ("observation_space", obs_space, observations),
            ("action_space", act_space, actions),
        ):
            wrong = space_problems(space, subtree(example, path), path)
            if wrong:
                raise VaultArgumentError(
                    f"{arg} {space} does not hold the leaves of {path!r}: " + "; ".join(wrong)
                )
        target = Path(root).expanduser() if root is not None else datasets_root()
        target = target.absolute() / dataset_id
        if target.exists():
            raise VaultExistsError(f"{target} already exists; choose a new dataset id")
        table = vault.episodes()
        # an episode whose beginning was lost (it starts at a seam) is no Minari episode: its
        # first observation is not an initial state and its return misses the lost steps
        table = table[np.asarray(table.start_known, bool)]
        if len(table) == 0:
            raise VaultReadError(
                f"{vault.location} has no complete episodes (ended, with their beginning "
                "stored): nothing to export as Minari episodes"
            )
        step = vault.manifest.step_bytes
        with _staged(target) as tmp:
            storage = MinariStorage.new(
                tmp / DATA_DIR,
                observation_space=obs_space,
                action_space=act_space,
                env_spec=info.pop("env_spec"),
                data_format=data_format,
                jpeg_encoding=False,
            )
            info.setdefault("description", f"exported by rlvault from {vault.location}")
            storage.update_metadata(
                {**info, "dataset_id": dataset_id, "minari_version": minari.__version__}
            )
            total = int(table.length.sum()) * step
            done, batch, size, dropped = 0, [], 0, 0
            if progress:
                progress(0, total)
            for episode in map(plain, vault.iter_episodes(table)):
                dropped += drops_next(episode, fields)
                batch.append(_episode_buffer(EpisodeBuffer, episode, fields))
                size += len(np.asarray(subtree(episode, str(fields["terminations"])))) * step
                if size >= block_bytes:
                    storage.update_episodes(batch)
                    done, batch, size = done + size, [], 0
                    if progress:
                        progress(done, total)
            if batch:
                storage.update_episodes(batch)
            if progress:
                progress(total, total)
        if dropped:
            warnings.warn(
                f"{vault.location}: in {dropped} of {len(table)} episodes the next "
                f"observations ({next_observations!r}) are not the following observations "
                f"({observations!r}); a Minari episode holds one observation more than its "
                "steps, so only each episode's last next observation was exported",
                UserWarning,
                stacklevel=2,
            )
        if namespace is not None and root is None:
            _namespace(namespace)
    return target


def _episode_buffer(cls: Any, episode: Any, fields: dict[str, str | None]) -> Any:
    def part(name: str) -> Any:
        path = fields[name]
        return None if path is None else subtree(episode, path)

    obs, nxt = part("observations"), part("next_observations")
    rewards = np.asarray(part("rewards"))
    length = len(rewards)
    trunc = part("truncations")
    return cls(
        observations=tree_map(lambda o, n: np.concatenate([o, n[-1:]]), obs, nxt),
        actions=part("actions"),
        rewards=rewards,
        terminations=np.asarray(part("terminations")).astype(bool),
        truncations=np.zeros(length, bool) if trunc is None else np.asarray(trunc).astype(bool),
    )


@contextlib.contextmanager
def _staged(target: Path) -> Iterator[Path]:
    """A hidden sibling of ``target`` renamed into place at the end, removed on any failure;
    those of exports killed before (no process holds them) are removed first."""
    made = [p for p in reversed(target.parents) if not p.exists()]  # outermost first
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_partials(target)  # what exports killed here before left
    tmp = target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    held = held_folder(tmp)  # held while it is built: another export's sweep leaves it
    if held is None:
        tmp.mkdir()  # cannot be made: this says why
    done = False
    try:
        yield tmp
        os.replace(tmp, target)
        done = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if held is not None:
            os.close(held)
        for folder in () if done else reversed(made):  # the namespace folders it made
            with contextlib.suppress(OSError):
                folder.rmdir()


def _namespace(namespace: str) -> None:
    from minari.namespace import create_namespace, list_local_namespaces

    if namespace not in list_local_namespaces():
        create_namespace(namespace)


def _recorded(vault: Vault, key: str) -> Any:
    """A space recorded by :func:`import_minari` in the vault's metadata, or None."""
    origin = vault.metadata.get("imported_from")
    if not isinstance(origin, dict) or origin.get("format") != "minari" or key not in origin:
        return None
    from minari.serialization import deserialize_space

    return deserialize_space(origin[key])


# the keys of Minari's metadata that describe the files themselves: an export writes its own
OWN_KEYS = frozenset(
    {
        "dataset_id", "total_episodes", "total_steps", "dataset_size", "data_format",
        "jpeg_encoding", "minari_version", "observation_space", "action_space",
    }
)  # fmt: skip
AUTHOR_KEYS = ("author", "author_email")  # sets in Minari's metadata
TEXT_KEYS = ("code_permalink", "algorithm_name", "description")  # strings in Minari's


def _sets_as_lists(value: Any) -> Any:
    """JSON for a set (the authors): a sorted list; anything else is not JSON."""
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(type(value).__name__)


def _export_metadata(vault: Vault, env_spec: Any, given: dict[str, Any] | None) -> dict[str, Any]:
    """The Minari metadata of an export: what an import recorded, updated by ``given`` and
    ``env_spec``; ``env_spec`` as an ``EnvSpec`` (or None), authors as sets."""
    from gymnasium.envs.registration import EnvSpec

    origin = vault.metadata.get("imported_from")
    recorded = (
        origin.get("metadata", {})
        if isinstance(origin, dict) and origin.get("format") == "minari"
        else {}
    )
    if given is not None and not isinstance(given, dict):
        raise VaultArgumentError(f"metadata must be a dict of Minari metadata, got {given!r}")
    info = {k: v for k, v in {**recorded, **(given or {})}.items() if k not in OWN_KEYS}
    spec = info.pop("env_spec", None) if env_spec is None else env_spec
    for key in AUTHOR_KEYS:
        value = info.get(key)
        if isinstance(value, (list, tuple, set, frozenset)):
            info[key] = {str(v) for v in value}
        elif value is not None:
            info[key] = {str(value)}
    for key, value in info.items():
        if key in TEXT_KEYS and not isinstance(value, str):
            raise VaultArgumentError(
                f"metadata[{key!r}] must be a str (Minari refuses anything else), got "
                f"{type(value).__name__} {value!r}"
            )
        try:
            json.dumps(value, default=_sets_as_lists)
        except (TypeError, ValueError):
            raise VaultArgumentError(
                f"metadata[{key!r}] = {value!r} ({type(value).__name__}) is not JSON, which "
                "Minari writes its metadata as: give plain numbers, strings, lists and dicts"
            ) from None
    if isinstance(spec, str):
        try:
            spec = EnvSpec.from_json(spec) if spec.lstrip().startswith("{") else spec
        except (ValueError, TypeError, KeyError) as err:
            raise VaultArgumentError(f"env_spec: not a Gymnasium EnvSpec JSON ({err})") from None
    if isinstance(spec, str):
        import gymnasium as gym

        try:
            spec = gym.spec(spec)
        except gym.error.Error as err:
            raise VaultArgumentError(f"env_spec: {err}") from None
    if spec is not None and not isinstance(spec, EnvSpec):
        raise VaultArgumentError(
            f"env_spec must be a gymnasium EnvSpec, its JSON or an environment id, got {spec!r}"
        )
    info["env_spec"] = spec
    return info
