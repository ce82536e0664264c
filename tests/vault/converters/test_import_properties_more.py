"""Flashbax and RLDS importers against a trivially correct model of their source, on sources
drawn by hypothesis.

Flashbax: vaults written by Flashbax 0.1.3's own ``flashbax.vault.Vault`` (its ``write`` fed
ring-buffer states built here, so a write may wrap the ring), with dict, og-marl-like nested
dict, NamedTuple, list-of-dict and top-level tuple structures, bool/uint8/int8/int16/uint16/
int32/float16/float32 leaves, one or several rows, no timestep at all, several vault names and
uids and user metadata (NaN and infinities too). The imported vault must hold every leaf's
values and dtype as handed to Flashbax, ``read_metadata`` must describe the structure, the
metadata must be the user's plus ``imported_from``, and the episode index (named leaves, per
row, float or bool flags) must be the one the flags describe.

RLDS: TFDS datasets built here by TFDS itself (no TensorFlow; ``disable_shuffling`` so the
record order is the generation order), as ``array_record`` files or rewritten as TFRecord
files, with nested step features of many dtypes, episodes of 0 to 4 steps, with and without
``is_terminal``, several files and splits, a skipped ``Text`` and per-episode metadata,
imported as one vault or as shards: every leaf in record order, the episode table, and
``imported_from``; then the documented refusals (flags that do not end the episode at its last
step: typed, named by file and record, nothing left) and what the progress callback reports.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import shutil
import struct
import uuid
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vault import Dataset, Vault, VaultStructureError
from vault.converters import import_flashbax, import_rlds
from vault.converters._flashbax import read_metadata

SETTINGS = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LEAF_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "float16", "float32"]
LEAF_SHAPES = [(), (2,), (1, 3)]


def _work(tmp_path: Path) -> Path:
    work = tmp_path / uuid.uuid4().hex[:8]
    work.mkdir()
    return work


def _value(shape: tuple[int, ...], dtype: str, row: int, t: int, salt: int) -> np.ndarray:
    """One timestep of one leaf in one row: distinct per (row, t, leaf), exact in every
    dtype drawn (small integers, quarters)."""
    size = math.prod(shape)
    base = (row * 37 + t * 11 + salt * 5 + np.arange(size)) % 97
    if dtype == "bool":
        out = (base % 3) == (salt % 3)
    elif dtype.startswith("float"):
        out = (base / 4 - 6).astype(dtype)
    else:
        out = base.astype(dtype)
    return np.asarray(out).reshape(shape)


def _table(vault: Any) -> list[tuple[Any, ...]]:
    t = vault.episodes(include_open=True)
    return sorted(
        (
            int(t.row[i]),
            int(t.start[i]),
            int(t.length[i]),
            None if np.isnan(t.returns[i]) else float(t.returns[i]),
            bool(t.truncated[i]),
            bool(t.complete[i]),
            bool(t.start_known[i]),
        )
        for i in range(len(t.start))
    )


def _leaf(tree: Any, path: str) -> Any:
    for key in path.split("/"):
        tree = tree[key]
    return tree


# --------------------------------------------------------------------------------- Flashbax
class Step(NamedTuple):
    obs: Any
    extra: Any


class _State(NamedTuple):
    """What ``flashbax.vault.Vault.write`` reads of a buffer state."""

    experience: Any
    current_index: int


class L(NamedTuple):
    """A leaf of a drawn structure: its per-timestep shape and dtype name."""

    shape: tuple[int, ...]
    dtype: str


def _children(spec: Any) -> dict[str, Any] | None:
    """The children of a structure node by vault key (dicts by key, NamedTuples by field,
    lists and tuples by index), or None for a leaf."""
    if isinstance(spec, L):
        return None
    if isinstance(spec, tuple) and hasattr(type(spec), "_fields"):
        return dict(spec._asdict())  # type: ignore[attr-defined]
    if isinstance(spec, (list, tuple)):
        return {str(i): v for i, v in enumerate(spec)}
    return {str(k): v for k, v in spec.items()}


def _paths(spec: Any, prefix: str = "") -> dict[str, L]:
    """The vault leaf paths of a structure and each leaf."""
    kids = _children(spec)
    if kids is None:
        return {prefix.rstrip("/"): spec}
    return {p: v for k, sub in kids.items() for p, v in _paths(sub, f"{prefix}{k}/").items()}


def _tree(spec: Any, leaf: Any, prefix: str = "") -> Any:
    """The structure of ``spec`` (its own container types) with every leaf replaced by
    ``leaf(path, L)``."""
    if isinstance(spec, L):
        return leaf(prefix.rstrip("/"), spec)
    if isinstance(spec, tuple) and hasattr(type(spec), "_fields"):
        fields = spec._asdict().items()  # type: ignore[attr-defined]
        return type(spec)(*(_tree(v, leaf, f"{prefix}{k}/") for k, v in fields))
    if isinstance(spec, (list, tuple)):
        return type(spec)(_tree(v, leaf, f"{prefix}{i}/") for i, v in enumerate(spec))
    return {k: _tree(v, leaf, f"{prefix}{k}/") for k, v in spec.items()}


FLASHBAX_KINDS = ["flat", "marl", "namedtuple", "lists", "tuple"]


@st.composite
def flashbax_sources(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    def leaf() -> L:
        return L(draw(st.sampled_from(LEAF_SHAPES)), draw(st.sampled_from(LEAF_DTYPES)))

    flag_dtype = draw(st.sampled_from(["bool", "float32", "uint8"]))
    flag, reward = L((), flag_dtype), L((), draw(st.sampled_from(["float32", "float16"])))
    spec: Any
    roles: dict[str, str | None]
    if kind == "flat":
        spec = {"obs": leaf(), "done": flag, "reward": reward, "trunc": flag}
        roles = {"done": "done", "truncated": "trunc", "reward": "reward"}
        if draw(st.booleans()):  # 2 KiB per row and step: several import blocks
            spec["frame"] = L((512,), "float32")
    elif kind == "marl":  # og-marl's layout: per-agent dicts under each field
        agents = ("agent_0", "agent_1")
        spec = {
            "observations": {a: leaf() for a in agents},
            "actions": dict.fromkeys(agents, L((), "int32")),
            "rewards": dict.fromkeys(agents, reward),
            "terminals": dict.fromkeys(agents, flag),
            "truncations": dict.fromkeys(agents, flag),
            "infos": {"state": leaf()},
        }
        agent = draw(st.sampled_from(agents))
        roles = {
            "done": f"terminals/{agent}",
            "truncated": f"truncations/{agent}",
            "reward": f"rewards/{agent}",
        }
    elif kind == "namedtuple":
        spec = Step(obs=leaf(), extra={"a": leaf(), "done": flag, "r": reward})
        roles = {"done": "extra/done", "truncated": None, "reward": "extra/r"}
    elif kind == "lists":  # list elements with distinct keys: Flashbax names them apart
        spec = {"parts": [{"a": leaf()}, {"done": flag}, {"r": reward}], "obs": leaf()}
        roles = {"done": "parts/1/done", "truncated": None, "reward": "parts/2/r"}
    else:  # a top-level tuple
        spec = (leaf(), {"done": flag})
        roles = {"done": "1/done", "truncated": None, "reward": None}
    use = draw(st.sampled_from(["all", "done only", "none"]))
    if use == "done only":
        roles = {"done": roles["done"], "truncated": None, "reward": None}
    elif use == "none":
        roles = {"done": None, "truncated": None, "reward": None}
    capacity = draw(st.integers(2, 5))
    steps = draw(st.integers(0, 9))
    writes, t = [], 0
    while t < steps:  # Flashbax loses data unless written within capacity - 1 steps
        t += draw(st.integers(1, min(capacity - 1, steps - t)))
        writes.append(t)
    return {
        "spec": spec,
        "roles": roles,
        "rows": draw(st.integers(1, 3)),
        "capacity": capacity,
        "steps": steps,
        "writes": writes,
        "name": draw(st.sampled_from(["run", "my vault", "og-marl.smac_3m"])),
        "uid": draw(st.sampled_from(["u", "20240102030405", "seed.0"])),
        "metadata": draw(
            st.sampled_from(
                [
                    None,
                    {"env": "toy", "seed": 3},
                    {"nested": {"a": [1, 2], "b": None}, "flag": True, "pair": (4, 5)},
                    {"best": float("nan"), "worst": float("-inf"), "top": float("inf")},
                    {"lr": np.float32(0.5), "note": "x"},
                ]
            )
        ),
        "block_bytes": draw(st.sampled_from([1 << 16, 1 << 26])),
    }


def _flag_values(path: str, dtype: str, row: int, t: int) -> Any:
    """Flags for the episode leaves: set on about a third of the steps, differently per leaf
    and row (done and truncated together now and then)."""
    salt = sum(map(ord, path))
    return np.asarray(np.random.default_rng([salt, row, t]).random() < 0.35).astype(dtype)


def _write_flashbax(rel_dir: Path, src: dict[str, Any]) -> dict[str, np.ndarray]:
    """The vault ``src`` describes, written by Flashbax from ring-buffer states; returns the
    data handed to it, ``{path: [rows, steps, ...]}``."""
    from flashbax.vault import Vault as FlashbaxVault

    rows, capacity, steps = src["rows"], src["capacity"], src["steps"]
    spec = src["spec"]
    salts = {p: i for i, p in enumerate(sorted(_paths(spec)))}

    def value(path: str, leaf: L, row: int, t: int) -> Any:
        if path.endswith(("done", "trunc")) or path.split("/")[0] in ("terminals", "truncations"):
            return _flag_values(path, leaf.dtype, row, t)
        return _value(leaf.shape, leaf.dtype, row, t, salts[path])

    want = {p: np.zeros((rows, steps, *leaf.shape), leaf.dtype) for p, leaf in _paths(spec).items()}
    for p, leaf in _paths(spec).items():
        for r in range(rows):
            for t in range(steps):
                want[p][r, t] = value(p, leaf, r, t)
    flat_ring = {
        p: np.zeros((rows, capacity, *leaf.shape), leaf.dtype) for p, leaf in _paths(spec).items()
    }
    ring = _tree(spec, lambda p, _: flat_ring[p])
    with contextlib.redirect_stdout(io.StringIO()):  # Flashbax prints
        vault = FlashbaxVault(
            src["name"], ring, rel_dir=str(rel_dir), vault_uid=src["uid"],
            metadata=src["metadata"],
        )  # fmt: skip
        for t in range(steps):
            for p, arr in flat_ring.items():
                arr[:, t % capacity] = want[p][:, t]
            if t + 1 in src["writes"]:
                vault.write(_State(ring, (t + 1) % capacity))
    return want


def _plain(value: Any) -> Any:
    """User metadata as the imported vault should hold it: what Flashbax's JSON says, NaN
    and infinities as strings, anything not JSON-native as Flashbax's ``str``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _flashbax_episodes(
    want: dict[str, np.ndarray], roles: dict[str, str | None]
) -> list[tuple[Any, ...]]:
    """Per row: an episode ends at every step whose done or truncated flag is set; truncated
    when it ends on truncation alone; returns in float64 (NaN without a reward leaf); the
    row's last episode, if it has steps, is open."""
    done = want[roles["done"]] != 0  # type: ignore[index]
    rows, steps = done.shape
    trunc = want[roles["truncated"]] != 0 if roles["truncated"] else np.zeros_like(done)
    reward = want[roles["reward"]].astype(np.float64) if roles["reward"] else None
    out = []
    for r in range(rows):
        start = 0
        for t in range(steps + 1):
            closed = t < steps and (done[r, t] or trunc[r, t])
            if closed or (t == steps and start < steps):
                end = t + 1 if closed else steps
                ret = None if reward is None else float(reward[r, start:end].sum())
                tr = bool(closed and trunc[r, t] and not done[r, t])
                out.append((r, start, end - start, ret, tr, bool(closed), True))
                start = end
    return sorted(out)


@pytest.mark.parametrize("kind", FLASHBAX_KINDS)
@settings(SETTINGS, max_examples=3)
@given(data=st.data())
def test_flashbax_import_matches_what_was_handed_to_flashbax(
    tmp_path: Path, kind: str, data: st.DataObject
) -> None:
    src = data.draw(flashbax_sources(kind))
    work = _work(tmp_path)
    want = _write_flashbax(work / "fbx", src)
    path = work / "fbx" / src["name"] / src["uid"]
    rows, steps, paths = src["rows"], src["steps"], _paths(src["spec"])

    meta = read_metadata(path)
    assert meta.rows == rows
    assert {leaf.path: (leaf.shape, leaf.dtype) for leaf in meta.leaves} == {
        p: ((rows, src["capacity"], *leaf.shape), leaf.dtype) for p, leaf in paths.items()
    }
    seen: list[tuple[int, int]] = []
    vault = import_flashbax(
        str(path), work / "out", **src["roles"], block_bytes=src["block_bytes"],
        progress=lambda d, t: seen.append((d, t)),
    )  # fmt: skip
    assert vault.rows == rows
    assert vault.committed_length == steps
    assert sorted(vault.leaf_names) == sorted(paths)
    got = vault.read_numpy()
    for p, value in want.items():
        leaf = _leaf(got, p)
        assert leaf.dtype == value.dtype, p
        np.testing.assert_array_equal(leaf, value, err_msg=p)
    step_bytes = rows * sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in paths.values())
    assert seen[0] == (0, step_bytes * steps)
    assert seen[-1] == (step_bytes * steps, step_bytes * steps)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    metadata = dict(vault.metadata)
    assert metadata.pop("imported_from") == {
        "format": "flashbax",
        "source": str(path),
        "version": 1.2,
        "vault_index": steps,
    }
    assert metadata == _plain(src["metadata"] or {})
    if src["roles"]["done"] is None:
        assert not vault.has_episodes
    else:
        assert vault.episode_leaves == src["roles"]
        assert _table(vault) == _flashbax_episodes(want, src["roles"])
    vault.close()


SMALL_X = np.arange(2)[:, None] * 10 + np.arange(3)  # what _small_flashbax(offset=0) holds


def _small_flashbax(rel_dir: Path, name: str, offset: int, **options: Any) -> Path:
    """A Flashbax vault of one int32 leaf, 2 rows x 3 timesteps: ``offset + 10 * row + t``."""
    from flashbax.vault import Vault as FlashbaxVault

    ring = {"x": offset + np.arange(2, dtype=np.int32)[:, None] * 10 + np.arange(4, dtype=np.int32)}
    with contextlib.redirect_stdout(io.StringIO()):
        vault = FlashbaxVault(name, ring, rel_dir=str(rel_dir), vault_uid="u", **options)
        vault.write(_State(ring, 3))
    return rel_dir / name / "u"


@pytest.mark.parametrize("folder", ["exp #3", "what?", "lr 100%"])
def test_flashbax_vault_moved_to_a_folder_with_url_characters_imports(
    tmp_path: Path, folder: str
) -> None:
    made = _small_flashbax(tmp_path / "made", "run", 0)
    moved = tmp_path / folder / "u"
    shutil.copytree(made, moved)  # a user's folder name; Flashbax itself cannot write there
    vault = import_flashbax(moved, tmp_path / "out")
    np.testing.assert_array_equal(vault.read_numpy()["x"], SMALL_X)


def test_flashbax_percent_escape_in_the_path_does_not_import_another_vault(
    tmp_path: Path,
) -> None:
    mine = _small_flashbax(tmp_path / "a", "run", 0)
    _small_flashbax(tmp_path / "b", "run", 500)
    shutil.copytree(mine, tmp_path / "exp%41" / "u")
    shutil.copytree(tmp_path / "b" / "run" / "u", tmp_path / "expA" / "u")
    vault = import_flashbax(tmp_path / "exp%41" / "u", tmp_path / "out")
    np.testing.assert_array_equal(vault.read_numpy()["x"], SMALL_X)


def test_flashbax_user_metadata_named_imported_from_does_not_hide_the_origin(
    tmp_path: Path,
) -> None:
    src = _small_flashbax(tmp_path, "run", 0, metadata={"imported_from": "smac 3m, og-marl"})
    vault = import_flashbax(src, tmp_path / "out")
    origin = vault.metadata["imported_from"]
    assert isinstance(origin, dict), origin
    assert origin["format"] == "flashbax"
    assert origin["source"] == str(src)
    assert origin["earlier"] == "smac 3m, og-marl"  # the user's value is kept in it


def test_flashbax_leaves_a_vault_cannot_store_are_refused_by_name_leaving_nothing(
    tmp_path: Path,
) -> None:
    import jax.numpy as jnp
    from flashbax.vault import Vault as FlashbaxVault

    ring = {"obs": jnp.zeros((2, 4, 3), jnp.bfloat16), "done": jnp.zeros((2, 4), jnp.bool_)}
    with contextlib.redirect_stdout(io.StringIO()):
        FlashbaxVault("bf", ring, rel_dir=str(tmp_path), vault_uid="u").write(_State(ring, 2))
    with pytest.raises(VaultStructureError) as err:
        import_flashbax(tmp_path / "bf" / "u", tmp_path / "out", done="done")
    assert "obs: dtype bfloat16 is not supported" in str(err.value)
    assert not (tmp_path / "out").exists()
    with pytest.raises(VaultStructureError, match="given without done_leaf"):
        import_flashbax(_small_flashbax(tmp_path, "ok", 0), tmp_path / "out", truncated="x")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- RLDS
RLDS_DTYPES = [*LEAF_DTYPES, "int64", "float64"]


@st.composite
def rlds_sources(draw: st.DrawFn) -> dict[str, Any]:
    def leaf() -> L:
        return L(draw(st.sampled_from(LEAF_SHAPES)), draw(st.sampled_from(RLDS_DTYPES)))

    train = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
    val = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    return {
        "splits": {"train": train, "val": val},
        "split": draw(st.sampled_from(["train", "val"])),
        "num_shards": draw(st.integers(1, min(3, len(train), len(val)))),
        "terminal": draw(st.booleans()),  # an is_terminal feature
        "terminal_every": draw(st.integers(1, 3)),  # episode e ends terminally if e % n == 0
        "step": {
            "observation": {"state": leaf(), "deep": {"pos": leaf()}},
            "action": leaf(),
            "reward": draw(
                st.sampled_from(
                    [None, L((), "float32"), L((), "float16"), L((), "int32"), L((2,), "float32")]
                )
            ),
        },
        "text": draw(st.booleans()),  # a Text step feature (skipped)
        "episode_metadata": draw(st.booleans()),  # a per-episode feature (skipped)
        "file_format": draw(st.sampled_from(["array_record", "tfrecord"])),
        "shards": draw(st.booleans()),
        "block_bytes": draw(st.sampled_from([1 << 16, 1 << 26])),
    }


def _rlds_features(spec: dict[str, Any]) -> Any:
    import tensorflow_datasets as tfds

    def feature(node: Any) -> Any:
        if isinstance(node, L):
            if node.shape == ():
                return tfds.features.Scalar(dtype=np.dtype(node.dtype))
            return tfds.features.Tensor(shape=node.shape, dtype=np.dtype(node.dtype))
        return tfds.features.FeaturesDict({k: feature(v) for k, v in node.items()})

    step = {k: feature(v) for k, v in spec["step"].items() if v is not None}
    for flag in ("is_first", "is_last", *(["is_terminal"] if spec["terminal"] else [])):
        step[flag] = tfds.features.Scalar(dtype=np.bool_)
    if spec["text"]:
        step["language_instruction"] = tfds.features.Text()
    step.update({k: extra for k, (extra, _) in spec.get("extra", {}).items()})
    top = {"steps": tfds.features.Dataset(step)}
    if spec["episode_metadata"]:
        top["episode_metadata"] = tfds.features.FeaturesDict(
            {"id": tfds.features.Scalar(dtype=np.int32)}
        )
    return tfds.features.FeaturesDict(top)


def _rlds_episode(spec: dict[str, Any], split: int, e: int, n: int) -> dict[str, Any]:
    """Episode ``e`` of split number ``split``, ``n`` steps: every value a function of
    (split, episode, step, leaf)."""
    leaves = _paths({k: v for k, v in spec["step"].items() if v is not None})
    salts = {p: i for i, p in enumerate(sorted(leaves))}
    steps = []
    for t in range(n):
        step: dict[str, Any] = {}
        for p, leaf in leaves.items():
            node = step
            *parents, last = p.split("/")
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = _value(leaf.shape, leaf.dtype, split * 50 + e, t, salts[p])
        step["is_first"] = t == 0
        step["is_last"] = t == n - 1
        if spec["terminal"]:
            step["is_terminal"] = t == n - 1 and e % spec["terminal_every"] == 0
        if spec["text"]:
            step["language_instruction"] = f"episode {e} step {t}"
        step.update({k: make(e, t) for k, (_, make) in spec.get("extra", {}).items()})
        steps.append(step)
    out: dict[str, Any] = {"steps": steps}
    if spec["episode_metadata"]:
        out["episode_metadata"] = {"id": np.int32(e)}
    return out


def _write_rlds(data_dir: Path, spec: dict[str, Any], episode: Any = _rlds_episode) -> Path:
    """The TFDS dataset ``spec`` describes, built by TFDS (no shuffling: records in the order
    generated, files in order), as ``array_record`` files or rewritten as TFRecord files."""
    import tensorflow_datasets as tfds

    class PropToy(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[call-arg]
        VERSION = tfds.core.Version("1.0.0")

        def _info(self) -> Any:
            return tfds.core.DatasetInfo(
                builder=self, features=_rlds_features(spec), disable_shuffling=True
            )

        def _split_generators(self, dl_manager: Any) -> Any:
            return {
                name: self._generate_examples(i, lengths)
                for i, (name, lengths) in enumerate(spec["splits"].items())
            }

        def _generate_examples(self, split: int, lengths: list[int]) -> Any:
            for e, n in enumerate(lengths):
                yield f"{e:06d}", episode(spec, split, e, n)

    builder = PropToy(data_dir=str(data_dir), file_format="array_record")
    config = tfds.download.DownloadConfig(
        num_shards=spec["num_shards"], compute_stats=tfds.download.ComputeStatsMode.SKIP
    )
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        builder.download_and_prepare(download_config=config)
    source = Path(builder.data_dir)
    if spec["file_format"] == "tfrecord":
        _as_tfrecord(source)
    return source


def _masked_crc(data: bytes) -> bytes:
    import google_crc32c

    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _as_tfrecord(source: Path) -> None:
    """Rewrite a TFDS directory's ``array_record`` files as TFRecord files (the same records,
    TFRecord framing), as TensorFlow writes them."""
    from array_record.python.array_record_module import ArrayRecordReader

    for path in sorted(source.glob("*.array_record-*")):
        reader = ArrayRecordReader(str(path))
        records = reader.read(0, reader.num_records()) if reader.num_records() else []
        reader.close()
        with open(source / path.name.replace(".array_record-", ".tfrecord-"), "wb") as f:
            for record in records:
                head = struct.pack("<Q", len(record))
                f.write(head + _masked_crc(head) + record + _masked_crc(record))
        path.unlink()
    info = json.loads((source / "dataset_info.json").read_text())
    info["fileFormat"] = "tfrecord"
    (source / "dataset_info.json").write_text(json.dumps(info))


def _rlds_model(
    spec: dict[str, Any], split: str, episodes: list[int]
) -> tuple[dict[str, np.ndarray], list[tuple[Any, ...]]]:
    """The steps of the given episodes of ``split`` (in order, those without steps left out)
    as ``{leaf path: [T, ...]}``, and their episode table."""
    index = list(spec["splits"]).index(split)
    lengths = spec["splits"][split]
    kept = [e for e in episodes if lengths[e]]
    flags = ["is_first", "is_last", *(["is_terminal"] if spec["terminal"] else [])]
    step = {k: v for k, v in spec["step"].items() if v is not None}
    leaves = _paths({**step, **{f: L((), "bool") for f in flags}})
    columns: dict[str, list[np.ndarray]] = {}
    for e in kept:
        for step in _rlds_episode(spec, index, e, lengths[e])["steps"]:
            for p in leaves:
                columns.setdefault(p, []).append(np.asarray(_leaf(step, p)))
    data = {
        p: np.stack(columns[p]).astype(leaf.dtype)
        if p in columns
        else np.zeros((0, *leaf.shape), leaf.dtype)
        for p, leaf in leaves.items()
    }
    reward = spec["step"].get("reward")
    table, start = [], 0
    for e in kept:
        n = lengths[e]
        ret = None
        if reward is not None and reward.shape == ():
            ret = float(data["reward"][start : start + n].astype(np.float64).sum())
        terminal = spec["terminal"] and e % spec["terminal_every"] == 0
        truncated = spec["terminal"] and not terminal
        table.append((0, start, n, ret, truncated, True, True))
        start += n
    return data, table


def _files(source: Path, split: str) -> tuple[list[str], list[int]]:
    """The split's file names in order and the records each holds (``dataset_info.json``)."""
    info = json.loads((source / "dataset_info.json").read_text())
    (entry,) = [s for s in info["splits"] if s["name"] == split]
    counts = [int(n) for n in entry["shardLengths"]]
    fmt = info["fileFormat"]
    names = [
        f"{info['name']}-{split}.{fmt}-{i:05d}-of-{len(counts):05d}" for i in range(len(counts))
    ]
    assert sorted(names) == sorted(p.name for p in source.glob(f"*-{split}.{fmt}-*"))
    return names, counts


def _check_rlds_vault(vault: Any, spec: dict[str, Any], split: str, episodes: list[int]) -> None:
    data, table = _rlds_model(spec, split, episodes)
    assert vault.rows == 1
    assert sorted(vault.leaf_names) == sorted(data)
    assert vault.committed_length == sum(spec["splits"][split][e] for e in episodes)
    got = vault.read_numpy()
    for p, value in data.items():
        leaf = _leaf(got, p)
        assert leaf.dtype == value.dtype, p
        np.testing.assert_array_equal(leaf[0], value, err_msg=p)
    reward = spec["step"].get("reward")
    assert vault.episode_leaves == {
        "done": "is_terminal" if spec["terminal"] else "is_last",
        "truncated": "is_last" if spec["terminal"] else None,
        "reward": "reward" if reward is not None and reward.shape == () else None,
    }
    assert _table(vault) == table


@SETTINGS
@given(spec=rlds_sources())
def test_rlds_import_matches_the_episodes_generated(tmp_path: Path, spec: dict[str, Any]) -> None:
    work = _work(tmp_path)
    source = _write_rlds(work / "tfds", spec)
    split = spec["split"]
    names, counts = _files(source, split)
    assert len(names) == spec["num_shards"]
    skipped = ["steps/language_instruction"] if spec["text"] else []
    skipped += ["episode_metadata (per episode)"] if spec["episode_metadata"] else []
    origin = {
        "format": "rlds", "source": str(source), "dataset": "prop_toy", "version": "1.0.0",
        "split": split, "file_format": spec["file_format"], "jpeg": "tensorflow",
        "skipped": skipped,
    }  # fmt: skip
    everything = list(range(len(spec["splits"][split])))
    if not spec["shards"]:
        vault = import_rlds(source, work / "out", split=split, block_bytes=spec["block_bytes"])
        assert isinstance(vault, Vault)
        _check_rlds_vault(vault, spec, split, everything)
        assert vault.metadata["imported_from"] == {**origin, "files": names}
        vault.close()
        return
    dataset = import_rlds(
        str(source), work / "out", split=split, shards=True, block_bytes=spec["block_bytes"]
    )
    assert isinstance(dataset, Dataset)
    assert dataset.shards == [f"{split}-{i:05d}" for i in range(len(names))]
    first = 0
    for i, (name, count) in enumerate(zip(names, counts, strict=True)):
        shard = Vault.open(work / "out" / "shards" / f"{split}-{i:05d}")
        _check_rlds_vault(shard, spec, split, list(range(first, first + count)))
        assert shard.metadata["imported_from"] == {**origin, "files": [name]}
        first += count
    assert first == len(everything)
    lengths = [n for n in spec["splits"][split] if n]
    assert dataset.episodes().length.tolist() == lengths


# ------------------------------------------------------------------ RLDS: refusals, progress
def _plain_spec(lengths: list[int], **changes: Any) -> dict[str, Any]:
    spec = {
        "splits": {"train": lengths}, "split": "train", "num_shards": 1, "terminal": True,
        "terminal_every": 2, "step": {"observation": {"state": L((2,), "float32")},
                                      "reward": L((), "float32")},
        "text": False, "episode_metadata": False, "file_format": "array_record",
        "shards": False, "block_bytes": 1 << 16,
    }  # fmt: skip
    return {**spec, **changes}


BAD_FLAGS = {
    # episode 2 (3 steps) of [2, 0, 3, 1]: flags that do not end it at its last step
    "is_last early": ({"is_last": [False, True, True]},
                      "steps/is_last: expected True at its last step (2) only, got True at [1, 2]"),
    "is_last never": ({"is_last": [False, False, False]},
                      "steps/is_last: expected True at its last step (2) only, got True at []"),
    "is_terminal early": ({"is_terminal": [False, True, True]},
                          ("steps/is_terminal: expected True at most at its last step (2), "
                           "got True at [1]")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_rlds_flags_that_do_not_end_the_episode_are_refused_by_file_and_record(
    tmp_path: Path, case: str
) -> None:
    flags, named = BAD_FLAGS[case]
    shards = case == "is_last never"  # each failed import waits out its staging's sweeps
    fmt = "tfrecord" if shards else "array_record"

    def episode(spec: dict[str, Any], split: int, e: int, n: int) -> dict[str, Any]:
        out = _rlds_episode(spec, split, e, n)
        if e == 2:
            for key, values in flags.items():
                for step, value in zip(out["steps"], values, strict=True):
                    step[key] = value
        return out

    source = _write_rlds(tmp_path / "tfds", _plain_spec([2, 0, 3, 1], file_format=fmt), episode)
    with pytest.raises(VaultStructureError) as err:
        import_rlds(source, tmp_path / "out", shards=shards)
    text = str(err.value)
    assert f"prop_toy-train.{fmt}-00000-of-00001: record 2: " in text, text
    assert named in text, text
    if shards:  # the dataset's root is made first; no shard, whole or half, is there
        assert not (tmp_path / "out" / "shards").exists() or not list(
            (tmp_path / "out" / "shards").iterdir()
        )
        assert Dataset.open(tmp_path / "out").shards == []
    else:
        assert not (tmp_path / "out").exists()


def _progress_of(source: Path, dest: Path, **options: Any) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    import_rlds(source, dest, progress=lambda d, t: seen.append((d, t)), **options)
    return seen


BIG_STEP = {"observation": {"state": L((64, 64), "float32")}, "reward": L((), "float32")}


def test_rlds_progress_ends_at_its_total(tmp_path: Path) -> None:
    # 16 KiB steps, 64 KiB blocks: every episode of 4 steps fills a block
    source = _write_rlds(tmp_path / "tfds", _plain_spec([4, 1, 4], num_shards=2, step=BIG_STEP))
    seen = _progress_of(source, tmp_path / "v", block_bytes=1 << 16)
    assert all(a[0] < b[0] for a, b in itertools.pairwise(seen)), seen
    assert seen[-1][0] == seen[-1][1] > 0, seen
    shards = _progress_of(source, tmp_path / "d", shards=True)
    assert shards[-1] == seen[-1], shards


def test_rlds_progress_reaches_the_total_when_the_split_ends_with_empty_episodes(
    tmp_path: Path,
) -> None:
    source = _write_rlds(tmp_path / "tfds", _plain_spec([4, 0, 0], step=BIG_STEP))
    seen = _progress_of(source, tmp_path / "v", block_bytes=1 << 16)
    assert seen[-1][0] == seen[-1][1] > 0, seen


@pytest.mark.parametrize("file", [0, 1])
def test_rlds_progress_of_chosen_files_ends_at_its_total(tmp_path: Path, file: int) -> None:
    # file 0 holds episodes of 1 and 1 step, file 1 of 1 and 6: the same count, not size
    spec = _plain_spec([1, 1, 1, 6], num_shards=2, step=BIG_STEP)
    source = _write_rlds(tmp_path / "tfds", spec)
    seen = _progress_of(source, tmp_path / "d", shards=True, files=[file])
    assert all(done <= total for done, total in seen), seen
    assert seen[-1][0] == seen[-1][1] > 0, seen


def _png16(pixels: np.ndarray) -> io.BytesIO:
    """A 16-bit grayscale PNG (encoded by Pillow: TFDS needs TensorFlow to encode uint16)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels[..., 0].astype(np.uint16)).save(out, format="PNG")
    out.seek(0)
    return out


def test_rlds_uint16_depth_images_are_imported(tmp_path: Path) -> None:
    import tensorflow_datasets as tfds

    def pixels(e: int, t: int) -> np.ndarray:
        return np.arange(6, dtype=np.uint16).reshape(2, 3, 1) * 9000 + e * 100 + t

    feature = tfds.features.Image(shape=(2, 3, 1), dtype=np.uint16, encoding_format="png")
    spec = _plain_spec([2, 3], extra={"depth": (feature, lambda e, t: _png16(pixels(e, t)))})
    source = _write_rlds(tmp_path / "tfds", spec)
    vault = import_rlds(source, tmp_path / "v")
    assert isinstance(vault, Vault)
    assert vault.metadata["imported_from"]["skipped"] == []
    want = np.stack([pixels(e, t) for e, n in enumerate([2, 3]) for t in range(n)])
    got = vault.read_numpy()["depth"][0]
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, want)


def test_rlds_a_feature_with_an_empty_axis_does_not_refuse_the_dataset(tmp_path: Path) -> None:
    import tensorflow_datasets as tfds

    feature = tfds.features.Tensor(shape=(2, 0), dtype=np.float32)
    spec = _plain_spec([2, 3], extra={"pad": (feature, lambda e, t: np.zeros((2, 0), np.float32))})
    source = _write_rlds(tmp_path / "tfds", spec)
    vault = import_rlds(source, tmp_path / "v")
    assert isinstance(vault, Vault)
    assert "steps/pad (empty shape [2, 0])" in vault.metadata["imported_from"]["skipped"]
    plain = {k: v for k, v in spec.items() if k != "extra"}
    _check_rlds_vault(vault, plain, "train", [0, 1])


# -------------------------------------------------------------- RLDS: shards' files and origin
def test_rlds_shards_files_given_as_numpy_indices(tmp_path: Path) -> None:
    source = _write_rlds(tmp_path / "tfds", _plain_spec([2, 1, 3], num_shards=2))
    mine: Any = np.array_split(np.arange(2), 2)[1]  # worker 1 of 2
    dataset = import_rlds(source, tmp_path / "d", shards=True, files=mine)
    assert isinstance(dataset, Dataset)
    assert dataset.shards == ["train-00001"]


def test_rlds_resume_names_the_same_dataset_by_another_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write_rlds(tmp_path / "tfds", _plain_spec([2, 1, 3], num_shards=2))
    monkeypatch.chdir(tmp_path)
    relative = Path(source).relative_to(tmp_path)
    import_rlds(relative, tmp_path / "d", shards=True, files=[0])  # one machine, then the rest
    dataset = import_rlds(source, tmp_path / "d", shards=True)
    assert isinstance(dataset, Dataset)
    assert dataset.shards == ["train-00000", "train-00001"]
