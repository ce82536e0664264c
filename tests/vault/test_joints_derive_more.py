"""Where derived vaults (``derive_slice``, ``derive_episodes``, ``combine``) meet the other
features, beyond ``test_derive.py`` and the other joint files: odd pytrees (NamedTuple,
dataclass, tuple/list, escaped leaf names, many dtypes) through every derive and appends to the
result; a writer appending to the source while a derive of it (by path, commit id or tag) is
copying; derives of derives (unknown episode starts carried through seams, the whole
``derived_from`` chain); datasets of shards (a tag, a shard added after it, an empty shard,
shards of other rows, ``spans``); destinations inside or above a source, on disk and on the real
S3 test server; and a derive run in a process that never imported the source's classes (as the
``vault`` command always is).

Every value read back is compared with a model whose values say where they belong
(``obs = 100_000 * salt + 1000 * row + t``), and every episode table with a brute-force
enumeration of the model's flags.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

import vault
from vault import (
    Dataset,
    EpisodeTable,
    Vault,
    VaultArgumentError,
    VaultError,
    VaultExistsError,
    VaultLocationError,
    VaultReadError,
    parse_location,
)
from vault.derive import _derive
from vault.testing import S3TestServer

REPO = Path(vault.__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ models
def data(rows: Any, t0: int, n: int, salt: int = 0) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of ``rows`` (a count or the source rows, in order)."""
    r = np.arange(rows) if isinstance(rows, int) else np.asarray(rows)
    t = np.arange(t0, t0 + n)[None, :]
    code = 100_000 * salt + 1000 * r[:, None] + t
    return {
        "obs": np.stack([code, -code], -1).astype(np.float32),
        "rew": (code % 7 + 0.5).astype(np.float32),
        "done": (t + r[:, None]) % 5 == 4,
        "trunc": (t + 2 * r[:, None]) % 7 == 6,
    }


EXAMPLE = {k: v[0, 0] for k, v in data(1, 0, 1).items()}
ROLES: dict[str, Any] = {"done_leaf": "done", "truncated_leaf": "trunc", "reward_leaf": "rew"}
Episode = tuple[int, int, int, float, bool, bool, bool]


def cat(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}


def model_episodes(
    d: dict[str, np.ndarray], known: Any, seams: dict[int, Any] | None = None
) -> list[Episode]:
    """(row, start, length, return, truncated, complete, start_known) of every episode of
    ``d`` (open ones too): ``known[r]`` says whether row ``r``'s first episode starts known;
    ``seams`` maps a timestep to the rows' known flags of the episodes starting there (the
    episodes open before it are dropped)."""
    seams = seams or {}
    out = []
    n = d["done"].shape[1]
    for r in range(d["done"].shape[0]):
        start, ok = 0, bool(np.asarray(known)[r])
        for t in range(n):
            if t in seams and t > 0:
                start, ok = t, bool(np.asarray(seams[t])[r])
            if d["done"][r, t] or d["trunc"][r, t]:
                ret = float(np.sum(d["rew"][r, start : t + 1], dtype=np.float64))
                cut = bool(d["trunc"][r, t] and not d["done"][r, t])
                out.append((r, start, t + 1 - start, ret, cut, True, ok))
                start, ok = t + 1, True
        if start < n:
            ret = float(np.sum(d["rew"][r, start:n], dtype=np.float64))
            out.append((r, start, n - start, ret, False, False, ok))
    return sorted(out)


def table_rows(table: EpisodeTable) -> list[Episode]:
    return sorted(
        (int(r), int(s), int(n), float(x), bool(t), bool(c), bool(k))
        for r, s, n, x, t, c, k in zip(
            table.row, table.start, table.length, table.returns, table.truncated,
            table.complete, table.start_known, strict=True,
        )
    )  # fmt: skip


def equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], where: str = "") -> None:
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        assert got[key].dtype == value.dtype, (where, key)
        np.testing.assert_array_equal(got[key], value, err_msg=f"{where} {key}")


def ended(d: dict[str, np.ndarray], t: int) -> np.ndarray:
    """Per row: does an episode end at ``t`` (so one starts, known, at ``t + 1``)?"""
    return d["done"][:, t] | d["trunc"][:, t]


def sound(where: Any) -> None:
    report = vault.verify(where)
    assert report.ok, [str(p) for p in report.problems]
    assert report.warnings == []


def make(path: Any, parts: list[tuple[int, int]], rows: int = 3, salt: int = 0) -> str:
    with Vault.create(str(path), EXAMPLE, rows=rows, **ROLES) as v:
        for t0, n in parts:
            v.append(data(rows, t0, n, salt))
    return str(path)


# ------------------------------------------------------------ 1. odd pytrees and dtypes
class Pair(NamedTuple):
    a: Any
    b: Any


@dataclasses.dataclass
class Box:
    flag: Any
    grid: Any


def odd(rows: Any, t0: int, n: int) -> dict[str, Any]:
    """A pytree of every container kind, escaped leaf names (``/``, ``.``, unicode) and many
    dtypes, the episode leaves nested under escaped names; values say where they belong."""
    d = data(rows, t0, n)
    code = d["obs"][..., 0].astype(np.int64)
    return {
        "o/b.s": (d["obs"] / 8).astype(np.float16),
        "ü": (code % 251).astype(np.uint8),
        "pair": Pair(code << 40, (code[..., None] + np.array([0.25, 0.5])).astype(np.float64)),
        "box": Box(code % 3 == 0, np.repeat(code[..., None, None], 3, axis=-2).astype(np.int16)),
        "tup": ((code % 100).astype(np.int8), [(-code).astype(np.int32)]),
        "ep": {"d.one": d["done"], "r/w": d["rew"], "tr": d["trunc"]},
    }  # fmt: skip


ODD_ROLES: dict[str, Any] = {
    "done_leaf": "ep/d.one",
    "truncated_leaf": "ep/tr",
    "reward_leaf": "ep/r%2Fw",
}


def flat(tree: Any, path: str = "") -> dict[str, np.ndarray]:
    """``{path: array}`` of a pytree, checking each container's type on the way."""
    if isinstance(tree, dict):
        return {k: v for key in tree for k, v in flat(tree[key], f"{path}/{key}").items()}
    if isinstance(tree, Pair | Box):
        names = tree._fields if isinstance(tree, Pair) else ("flag", "grid")
        kind = type(tree).__name__
        return {
            k: v for f in names for k, v in flat(getattr(tree, f), f"{path}/{kind}.{f}").items()
        }
    if isinstance(tree, tuple | list):
        kind = type(tree).__name__
        return {k: v for i, x in enumerate(tree) for k, v in flat(x, f"{path}/{kind}{i}").items()}
    return {path: np.asarray(tree)}


def pick(tree: Any, rows: Any, lo: int, hi: int) -> Any:
    return {k: v[rows][:, lo:hi] for k, v in flat(tree).items()}


def test_odd_pytrees_and_dtypes_survive_every_derive_and_appends_to_it(tmp_path: Path) -> None:
    """Slice (rows out of order and repeated), selected episodes and combine of a vault of
    every container kind, escaped names and many dtypes: the same containers and dtypes, the
    model's values, episodes rebuilt through the escaped episode leaves; then appends to the
    slice continue its open episodes, read back exactly and verify."""
    example = {
        "o/b.s": np.zeros(2, np.float16), "ü": np.uint8(0),
        "pair": Pair(np.int64(0), np.zeros(2, np.float64)),
        "box": Box(np.bool_(False), np.zeros((3, 1), np.int16)),
        "tup": (np.int8(0), [np.int32(0)]),
        "ep": {"d.one": np.bool_(False), "r/w": np.float32(0), "tr": np.bool_(False)},
    }  # fmt: skip
    with Vault.create(str(tmp_path / "src"), example, rows=3, **ODD_ROLES) as v:
        for t0, n in ((0, 5), (5, 9), (14, 6)):
            v.append(odd(3, t0, n))
    src = Vault.open(str(tmp_path / "src"))
    whole = flat(odd(3, 0, 20))
    equal(flat(src.read_numpy()), whole, "source")

    rows = [2, 0, 2]
    part = vault.derive_slice(src, tmp_path / "slice", rows=rows, start=3, stop=17)
    assert part.leaf_names == src.leaf_names
    assert part.manifest.structure == src.manifest.structure
    equal(flat(part.read_numpy()), pick(odd(3, 0, 20), rows, 3, 17), "slice")
    model = {k: v[rows][:, 3:17] for k, v in data(3, 0, 20).items()}
    known = ended(data(rows, 0, 20), 2)
    assert table_rows(part.episodes(include_open=True)) == model_episodes(model, known)

    with Vault.open(part.location, mode="a") as w:
        w.append(odd(rows, 17, 6))
    grown = Vault.open(part.location)
    equal(flat(grown.read_numpy()), pick(odd(3, 0, 23), rows, 3, 23), "slice + appends")
    model = {k: v[:, 3:23] for k, v in data(rows, 0, 23).items()}
    table = grown.episodes()
    assert table_rows(grown.episodes(include_open=True)) == model_episodes(model, known)
    for i in range(len(table)):
        r, s, n = int(table.row[i]), int(table.start[i]), int(table.length[i])
        equal(
            flat(grown.read_episode(i)),
            {k: v[r, s : s + n] for k, v in flat(grown.read_numpy()).items()},
        )
    sound(grown.location)

    chosen = src.episodes().select(min_length=2)
    picked = vault.derive_episodes(src, tmp_path / "episodes", chosen)
    assert picked.manifest.structure == src.manifest.structure
    order = np.lexsort((chosen.row, chosen.start))
    joined = {
        k: np.concatenate([v[r, s : s + n] for r, s, n in zip(
            chosen.row[order], chosen.start[order], chosen.length[order], strict=True
        )])[None]
        for k, v in whole.items()
    }  # fmt: skip
    equal(flat(picked.read_numpy()), joined, "episodes")
    got = picked.episodes()
    assert got.returns.tolist() == chosen.returns[order].tolist()
    assert got.truncated.tolist() == chosen.truncated[order].tolist()

    # the source then the grown slice (3 rows each), uncompressed: a seam between them, the
    # slice's first episodes as unknown as they were in it
    both = vault.combine([src, part.location], tmp_path / "both", codec=None)
    assert both.manifest.structure == src.manifest.structure
    tail = pick(odd(3, 0, 23), rows, 3, 23)
    equal(
        flat(both.read_numpy()),
        {k: np.concatenate([v, tail[k]], axis=1) for k, v in whole.items()},
        "combine",
    )
    assert [(s.at, s.lost) for s in both.seams] == [(20, 0)]
    joint = cat(data(3, 0, 20), model)
    assert table_rows(both.episodes(include_open=True)) == model_episodes(
        joint, np.ones(3, bool), {20: known}
    )
    sound(both.location)


# ------------------------------------------------------------ 2. a writer during a derive
def test_appends_while_a_derive_copies_change_nothing_it_derives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's writer appends between every block a derive copies (three timesteps
    a block here): a derive of the source by path, at a commit id, at a commit number and at a
    tag holds exactly the commit it started from, with its episodes, and verifies."""
    monkeypatch.setattr(_derive, "BLOCK_BYTES", 3 * 3 * 14)  # 3 timesteps of 3 rows
    writer = Vault.create(str(tmp_path / "src"), EXAMPLE, rows=3, **ROLES)
    writer.append(data(3, 0, 5))
    writer.append(data(3, 5, 6))
    pin, number = writer.commit_id, 2
    writer.tag("eleven")
    grown = [11]

    def want_src_obs(r: int, s: int, n: int) -> np.ndarray:
        return data(3, 0, 11)["obs"][r, s : s + n]

    def append_more(done: int, total: int) -> None:
        writer.append(data(3, grown[0], 2))
        grown[0] += 2

    try:
        sources: dict[str, str | Vault] = {
            "path": str(tmp_path / "src"),
            "id": Vault.open(str(tmp_path / "src"), at=pin),
            "number": Vault.open(str(tmp_path / "src"), at=number),
            "tag": Vault.open(str(tmp_path / "src"), at="eleven"),
        }
        for how, source in sources.items():
            length = grown[0] if how == "path" else 11
            want = data(3, 0, length)
            out = vault.derive_slice(source, tmp_path / f"{how}-s", rows=[1, 2], start=2,
                                     progress=append_more)  # fmt: skip
            equal(out.read_numpy(), {k: v[[1, 2], 2:] for k, v in want.items()}, how)
            assert table_rows(out.episodes(include_open=True)) == model_episodes(
                {k: v[[1, 2], 2:] for k, v in want.items()}, ended(want, 1)[[1, 2]]
            )
            sound(out.location)
            table = Vault.open(str(tmp_path / "src"), at=pin).episodes()
            picked = vault.derive_episodes(source, tmp_path / f"{how}-e", table,
                                           progress=append_more)  # fmt: skip
            ordered = table[np.lexsort((table.row, table.start))]
            starts = np.cumsum([0, *ordered.length[:-1]])
            assert table_rows(picked.episodes()) == sorted(
                (0, int(s), int(n), float(x), bool(t), True, True)
                for s, n, x, t in zip(
                    starts, ordered.length, ordered.returns, ordered.truncated, strict=True
                )
            )
            parts = [want_src_obs(r, s, n) for r, s, n in zip(
                ordered.row, ordered.start, ordered.length, strict=True)]  # fmt: skip
            np.testing.assert_array_equal(picked.read_numpy()["obs"][0], np.concatenate(parts))
            if how != "path":
                both = vault.combine([source, source], tmp_path / f"{how}-c",
                                     progress=append_more)  # fmt: skip
                equal(both.read_numpy(), cat(want, want), how)
                assert both.seams[0].at == 11
    finally:
        writer.close()
    assert Vault.open(str(tmp_path / "src")).committed_length == grown[0]
    sound(str(tmp_path / "src"))


# ----------------------------------------------------------------- 3. derives of derives
def test_a_chain_of_derives_carries_unknown_starts_seams_and_its_whole_record(
    tmp_path: Path,
) -> None:
    """slice (mid-episode) -> every complete episode of it (those of unknown start each begin
    a restart seam that says so) -> a slice of that from one of those seams -> combined with
    the first source: each step's data, seams and episodes are the model's, and
    ``derived_from`` says exactly what each did, nesting the whole chain (a user's own
    ``derived_from`` at its root); the user's other metadata is kept."""
    meta = {"run": "ü/é", "derived_from": "by hand"}
    with Vault.create(str(tmp_path / "src"), EXAMPLE, rows=3, metadata=meta, **ROLES) as v:
        v.append(data(3, 0, 7))
        v.append(data(3, 7, 9))
    src = Vault.open(str(tmp_path / "src"))
    whole = data(3, 0, 16)

    s1 = vault.derive_slice(src, tmp_path / "s1", rows=[0, 1], start=3, stop=14)
    m1 = {k: v[[0, 1], 3:14] for k, v in whole.items()}
    known = ended(whole, 2)[[0, 1]]
    assert known.tolist() == [False, False]  # both rows start mid-episode
    assert table_rows(s1.episodes(include_open=True)) == model_episodes(m1, known)
    r1 = {"source": src.location, "op": "slice", "start": 3, "stop": 14, "rows": [0, 1],
          "derived_from": "by hand"}  # fmt: skip
    assert s1.metadata == {"run": "ü/é", "derived_from": r1}

    table = s1.episodes()
    assert not table.start_known.all()
    e1 = vault.derive_episodes(s1, tmp_path / "e1", table)
    ordered = table[np.lexsort((table.row, table.start))]
    starts = np.concatenate([[0], np.cumsum(ordered.length)[:-1]]).astype(int)
    m2 = {
        k: np.concatenate([v[r, s : s + n] for r, s, n in zip(
            ordered.row, ordered.start, ordered.length, strict=True)])[None]
        for k, v in m1.items()
    }  # fmt: skip
    equal(e1.read_numpy(), m2, "episodes")
    unknown = [int(s) for s, k in zip(starts, ordered.start_known, strict=True) if not k]
    assert [(s.at, s.lost) for s in e1.seams] == [(at, 0) for at in unknown if at > 0]
    want = sorted(
        (0, int(s), int(n), float(x), bool(t), True, bool(k))
        for s, n, x, t, k in zip(
            starts,
            ordered.length,
            ordered.returns,
            ordered.truncated,
            ordered.start_known,
            strict=True,
        )
    )
    assert table_rows(e1.episodes(include_open=True)) == want
    r2 = {"source": s1.location, "op": "episodes", "count": len(table), "derived_from": r1}
    assert e1.metadata == {"run": "ü/é", "derived_from": r2}

    at = unknown[-1]  # a seam whose episode has no known start
    s2 = vault.derive_slice(e1, tmp_path / "s2", start=at)
    m3 = {k: v[:, at:] for k, v in m2.items()}
    equal(s2.read_numpy(), m3, "slice of episodes")
    assert table_rows(s2.episodes(include_open=True)) == [
        (0, s - at, n, x, t, c, k) for _, s, n, x, t, c, k in want if s >= at
    ]
    assert s2.episodes().start_known.tolist()[0] is False
    r3 = {"source": e1.location, "op": "slice", "start": at, "stop": e1.committed_length,
          "rows": [0], "derived_from": r2}  # fmt: skip
    assert s2.metadata == {"run": "ü/é", "derived_from": r3}

    one = vault.derive_slice(src, tmp_path / "one", rows=[1])
    both = vault.combine([s2, one], tmp_path / "both")
    n3 = m3["obs"].shape[1]
    equal(both.read_numpy(), cat(m3, {k: v[[1]] for k, v in whole.items()}), "combine")
    assert [(s.at, s.lost) for s in both.seams] == [(n3, 0)]
    after = [
        (0, s + n3, n, x, t, c, k)
        for _, s, n, x, t, c, k in model_episodes({k: v[[1]] for k, v in whole.items()}, [True])
    ]
    # s2's open episode at its end is dropped at the joint
    assert table_rows(both.episodes(include_open=True)) == sorted(
        [*table_rows(s2.episodes()), *after]
    )
    r0 = {"source": src.location, "op": "slice", "start": 0, "stop": 16, "rows": [1],
          "derived_from": "by hand"}  # fmt: skip
    assert both.metadata == {
        "run": "ü/é",
        "derived_from": {
            "source": s2.location, "op": "combine", "count": 2,
            "sources": [{"source": s2.location, "derived_from": r3},
                        {"source": one.location, "derived_from": r0}],
            "derived_from": r3,
        },
    }  # fmt: skip
    for made in (s1, e1, s2, both):
        sound(made.location)


# ------------------------------------------------------------------------------ 4. datasets
def dataset(root: Any) -> Dataset:
    """Shards ``a`` (2 rows x 9), ``b`` (3 rows x 11, two appends), ``e`` (empty), tagged
    ``t``; then ``late`` joins (2 rows x 6) and ``b`` grows by 4: the dataset at ``t``."""
    ds = Dataset.create(str(root), EXAMPLE, rows=2, **ROLES)
    with ds.shard("a") as w:
        w.append(data(2, 0, 9, salt=1))
    with ds.shard("b", rows=3) as w:
        w.append(data(3, 0, 5, salt=2))
        w.append(data(3, 5, 6, salt=2))
    ds.shard("e").close()
    Dataset.open(str(root)).tag("t")
    again = Dataset.create(str(root), EXAMPLE, rows=2, exist_ok=True, **ROLES)
    with again.shard("late") as w:
        w.append(data(2, 0, 6, salt=3))
    with Vault.open(f"{root}/shards/b", mode="a") as w:
        w.append(data(3, 11, 4, salt=2))
    return Dataset.open(str(root), at="t")


TAGGED = {"a": data(2, 0, 9, 1), "b": data(3, 0, 11, 2), "e": data(2, 0, 0)}


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return dataset(tmp_path_factory.mktemp("derive-ds") / "ds")


def test_a_tagged_dataset_derives_its_tagged_shards_only(tagged: Dataset, tmp_path: Path) -> None:
    """A dataset at a tag, with an empty shard and shards of other rows and lengths: a slice
    is a dataset of exactly its tagged shards at their tagged data (not the shard that joined
    later, nor what ``b`` appended after the tag), episodes rebuilt, each shard recording its
    slice; its episodes derive shard by shard; a live table naming the later shard is refused
    naming it, with nothing written."""
    assert tagged.shards == ["a", "b", "e"]
    out = vault.derive_slice(tagged, tmp_path / "all", rows=[1, 0])
    assert out.shards == ["a", "b", "e"]
    assert out.committed_lengths == {"a": 9, "b": 11, "e": 0}
    for name, model in TAGGED.items():
        sub = {k: v[[1, 0]] for k, v in model.items()}
        equal(out.read_numpy(name), sub, name)
        shard = out.vault(name)
        assert table_rows(shard.episodes(include_open=True)) == model_episodes(sub, [True] * 2)
        assert shard.metadata["derived_from"] == {
            "source": tagged.vault(name).location, "op": "slice", "shard": name,
            "start": 0, "stop": len(model["obs"][0]), "rows": [1, 0],
        }  # fmt: skip
        sound(shard)

    table = tagged.episodes()
    assert table.shard is not None
    assert sorted(set(table.shard.tolist())) == ["a", "b"]
    picked = vault.derive_episodes(tagged, tmp_path / "eps", table)
    parts = []
    for name in ("a", "b"):
        mine = table[table.shard == name]
        for s, r, n in sorted(zip(mine.start.tolist(), mine.row.tolist(), mine.length.tolist(),
                                  strict=True)):  # fmt: skip
            parts.append({k: v[[r], s : s + n] for k, v in TAGGED[name].items()})
    equal(picked.read_numpy(), cat(*parts), "dataset episodes")
    assert len(picked.episodes()) == len(table)
    assert picked.metadata["derived_from"] == {
        "source": tagged.vault("a").location,
        "op": "episodes",
        "count": len(table),
        "shards": 2,
    }
    sound(picked.location)

    live = Dataset.open(tagged.location).episodes()
    with pytest.raises(VaultArgumentError, match="no shard 'late'"):
        vault.derive_episodes(tagged, tmp_path / "no", live)
    assert not (tmp_path / "no").exists()


def test_spans_that_select_no_timestep_are_refused(tagged: Dataset, tmp_path: Path) -> None:
    """``derive_slice``: "VaultReadError: rows or a time range that select nothing"; a vault's
    empty range is refused so ("a derived vault holds at least one"). ``spans={"a": (4, 4)}``
    selects nothing of shard ``a`` (9 timesteps): refused, nothing written."""
    with pytest.raises(VaultReadError, match="selects no timestep"):
        vault.derive_slice(tagged.vault("a"), tmp_path / "v", start=4, stop=4)
    with pytest.raises(VaultReadError):
        vault.derive_slice(tagged, tmp_path / "ds", spans={"a": (4, 4)})
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("bad", [5, (1, 2, 3), "1:3"], ids=["int", "triple", "text"])
def test_a_malformed_span_is_an_argument_error_naming_spans(
    tagged: Dataset, tmp_path: Path, bad: Any
) -> None:
    """``spans``: ``{shard: (start, stop)}``; anything else is the caller's mistake, a
    ``VaultArgumentError`` that names ``spans`` (as a spans that is not a mapping is)."""
    with pytest.raises(VaultArgumentError, match="spans"):
        vault.derive_slice(tagged, tmp_path / "x", spans=[("a", (1, 3))])  # type: ignore[call-overload]
    with pytest.raises(VaultArgumentError, match="spans"):
        vault.derive_slice(tagged, tmp_path / "x", spans={"a": bad})
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("inside", ["shards/best", "best"])
def test_derived_episodes_of_a_dataset_are_never_written_inside_it(
    tmp_path: Path, inside: str
) -> None:
    """The module's promise: "A destination inside a source is refused before anything is
    written" (``VaultLocationError``, as ``derive_slice`` of the dataset does). Written into
    ``ROOT/shards/best``, the copy would be read as a shard, doubling the episodes."""
    root = tmp_path / "ds"
    ds = Dataset.create(str(root), EXAMPLE, rows=2, **ROLES)
    with ds.shard("a") as w:
        w.append(data(2, 0, 12))
    ds = Dataset.open(str(root))
    count = len(ds.episodes())
    with pytest.raises(
        VaultLocationError, match=r"inside the source dataset|a shard's place in the dataset"
    ):
        vault.derive_slice(ds, root / f"{inside}-slice")
    with contextlib.suppress(VaultLocationError):
        vault.derive_episodes(ds, root / inside, ds.episodes())
    again = Dataset.open(str(root))
    assert again.shards == ["a"]
    assert len(again.episodes()) == count
    assert not (root / inside).exists()


def test_a_table_of_another_shard_is_not_copied_from_this_one(
    tagged: Dataset, tmp_path: Path
) -> None:
    """``episodes``: "complete episodes of source". A dataset's table whose episodes lie in
    shard ``b`` (rows and times inside shard ``a`` too) given with shard ``a`` as the source
    must be refused, not copied from ``a``: the copy holds none of those episodes."""
    table = tagged.episodes()
    mine = table[(table.shard == "b") & (table.row < 2) & (table.start + table.length <= 9)]
    assert len(mine) > 0
    try:
        out = vault.derive_episodes(tagged.vault("a"), tmp_path / "wrong", mine)
    except (VaultArgumentError, VaultReadError):
        return
    got = out.read_numpy()["obs"][0, :, 0]
    want = np.concatenate([
        TAGGED["b"]["obs"][r, s : s + n, 0]
        for s, r, n in sorted(zip(mine.start.tolist(), mine.row.tolist(), mine.length.tolist(),
                                  strict=True))
    ])  # fmt: skip
    np.testing.assert_array_equal(got, want)  # today: shard a's values (salt 1, not 2)


def test_the_shards_of_a_derived_dataset_match_the_template_it_keeps(tmp_path: Path) -> None:
    """format.md §5.2: "A dataset that derive_slice makes of a dataset keeps its source's
    template, and each of its shards is a derived vault: its manifest also has its own
    created, user_metadata with derived_from and digest" -- the leaves (chunks, codecs) are
    the template's."""
    chunk: dict[str, Sequence[int]] = {
        "obs": [2, 4, 2],
        "rew": [2, 4],
        "done": [2, 4],
        "trunc": [2, 4],
    }
    ds = Dataset.create(str(tmp_path / "ds"), EXAMPLE, rows=2, chunk=chunk, codec="gzip", **ROLES)
    with ds.shard("a") as w:
        w.append(data(2, 0, 9))
    out = vault.derive_slice(Dataset.open(str(tmp_path / "ds")), tmp_path / "out", start=1)
    template = json.loads((tmp_path / "out" / "zarr.json").read_text())["attributes"][
        "rlvault_dataset"
    ]["template"]
    shard = out.vault("a").manifest
    assert [leaf.to_json() for leaf in shard.leaves] == template["leaves"]


# ------------------------------------------------- 5. a derive in a process of its own
class Step(NamedTuple):
    obs: Any
    done: Any


def cli(*args: Any) -> subprocess.CompletedProcess[str]:
    """The ``vault`` command in a process of its own (which never imports this module)."""
    return subprocess.run(
        [sys.executable, "-m", "vault", *map(str, args)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["vault", "dataset"])
def test_a_derive_keeps_the_container_classes_whoever_runs_it(tmp_path: Path, kind: str) -> None:
    """format.md §4.1.2: a reader that has not imported a NamedTuple's module reads it as a
    dict, but a derived vault is a copy "shaped like" its source: its manifest's structure is
    the source's (class, field order), so this process, which has the class, reads a ``Step``
    back; ``vault slice`` (a process that never has the class) must not change it."""
    steps = Step(
        np.arange(12, dtype=np.float32).reshape(2, 6), np.arange(12).reshape(2, 6) % 4 == 3
    )
    example = Step(np.float32(0), np.bool_(False))
    src = tmp_path / "src"
    if kind == "vault":
        with Vault.create(str(src), example, rows=2, done_leaf="done") as v:
            v.append(steps)
    else:
        with Dataset.create(str(src), example, rows=2, done_leaf="done").shard("a") as v:
            v.append(steps)
    done = cli("slice", src, "--out", tmp_path / "out", "--time", "1:")
    assert done.returncode == 0, done.stderr
    if kind == "vault":
        out = Vault.open(str(tmp_path / "out"))
        assert out.manifest.structure == Vault.open(str(src)).manifest.structure
        assert out.leaf_names == ["obs", "done"]
        got = out.read_numpy()
        both = vault.combine([str(src), out], tmp_path / "both")  # the same structure
        assert isinstance(both.read_numpy(), Step)
    else:
        got = Dataset.open(str(tmp_path / "out")).read_numpy("a")
    assert isinstance(got, Step)
    np.testing.assert_array_equal(got.obs, steps.obs[:, 1:])
    np.testing.assert_array_equal(got.done, steps.done[:, 1:])


# -------------------------------------------------------------- 6. S3 and local together
def s3_prefix(server: S3TestServer) -> str:
    return f"s3://{server.bucket}/derive-more-{uuid.uuid4().hex[:10]}"


def stored(where: str) -> list[str]:
    return sorted(bytes(k).decode() for k in parse_location(where).kvstore().list().result())


@pytest.mark.parametrize(
    "place",
    ["disk", "s3"],
)
def test_a_derive_into_the_folder_above_its_source_leaves_the_source(
    tmp_path: Path, request: pytest.FixtureRequest, place: str
) -> None:
    """A vault at ``P/shards/a`` (laid out like a dataset's shard, without a dataset root)
    derived into ``P``: "Sources are only read" and staging refuses "something other than an
    abandoned build" (``VaultExistsError``) -- on disk ``P`` is not empty, so it is refused;
    on S3 the source must be as it was, and the derive refused."""
    top = (
        str(tmp_path / "p")
        if place == "disk"
        else f"{s3_prefix(request.getfixturevalue('s3_env'))}/p"
    )
    src = make(f"{top}/shards/a", [(0, 5), (5, 4)], rows=2, salt=4)
    before = stored(src)
    try:
        vault.derive_slice(src, top, start=1)
    except VaultError as err:
        refused: VaultError | None = err
    else:
        refused = None
    assert stored(src) == before
    equal(Vault.open(src).read_numpy(), data(2, 0, 9, 4))
    assert isinstance(refused, VaultExistsError | VaultLocationError), refused


def test_a_tagged_local_dataset_derives_onto_s3_as_onto_disk(
    tagged: Dataset, s3_env: S3TestServer, tmp_path: Path
) -> None:
    """The tagged dataset on disk (an empty shard, one of 3 rows, one added after the tag)
    sliced into an S3 prefix and its episodes copied into another: the tagged data, the same
    fingerprints as the same derives onto disk, and both verify; appends to the S3 copy of a
    shard continue its open episodes."""
    top = s3_prefix(s3_env)
    on_s3 = vault.derive_slice(tagged, f"{top}/sliced", rows=[1], start=None)
    on_disk = vault.derive_slice(tagged, tmp_path / "sliced", rows=[1])
    assert on_s3.shards == on_disk.shards == ["a", "b", "e"]
    for name, model in TAGGED.items():
        equal(on_s3.read_numpy(name), {k: v[[1]] for k, v in model.items()}, name)
        assert on_s3.vault(name).fingerprint() == on_disk.vault(name).fingerprint(), name
        sound(on_s3.vault(name))
    picked = vault.derive_episodes(tagged, f"{top}/eps", tagged.episodes().select(min_length=2))
    again = vault.derive_episodes(tagged, tmp_path / "eps", tagged.episodes().select(min_length=2))
    assert picked.fingerprint() == again.fingerprint()
    equal(picked.read_numpy(), again.read_numpy())
    sound(picked.location)
    with Vault.open(f"{top}/sliced/shards/b", mode="a") as w:
        w.append(data([1], 11, 5, salt=2))
    grown = Vault.open(f"{top}/sliced/shards/b")
    model = data([1], 0, 16, salt=2)
    equal(grown.read_numpy(), model)
    assert table_rows(grown.episodes(include_open=True)) == model_episodes(model, [True])
    sound(grown.location)
