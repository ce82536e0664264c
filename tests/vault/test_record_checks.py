"""The fast paths of the record checks decide exactly as the plain rules they stand for: the
nesting limit (a walk over containers only, skipped where the text's brackets bound the depth),
the int rule (exact ints first), and a record read in one call of the file's size."""

from __future__ import annotations

import enum
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vault import VaultCorruptError
from vault.format._json import is_int, is_int_list, parse_json
from vault.format._limits import (
    MAX_EXTENT,
    MAX_RECORD_BYTES,
    MAX_RECORD_DEPTH,
    json_depth,
    max_json_depth,
)
from vault.storage._file import FileLocation


def _depth_by_rule(doc: Any) -> int:
    """The nesting depth as the format defines it (recursive: fine for these small docs)."""
    if isinstance(doc, dict):
        return 1 + max((_depth_by_rule(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((_depth_by_rule(v) for v in doc), default=0)
    return 0


def _int_by_rule(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_EXTENT


def _nested(depth: int) -> Any:
    doc: Any = 0
    for i in range(depth):
        doc = [doc] if i % 2 else {"k": doc}
    return doc


_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(alphabet='[]{}"\\ ab\u00e9\u20ac', max_size=6),
)
_docs = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=150)
@given(doc=_docs, encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_the_depth_walk_and_the_bracket_bound_agree_with_the_rule(doc: Any, encoding: str) -> None:
    assert json_depth(doc) == _depth_by_rule(doc)
    text = json.dumps(doc, ensure_ascii=False)
    assert max_json_depth(text.encode(encoding)) >= json_depth(doc)
    assert max_json_depth(text) >= json_depth(doc)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_the_nesting_limit_holds_at_its_edge_in_every_encoding(encoding: str) -> None:
    at_limit = json.dumps({"a": _nested(MAX_RECORD_DEPTH - 1)}).encode(encoding)
    assert max_json_depth(at_limit) == MAX_RECORD_DEPTH  # the walk is skipped: still accepted
    assert json_depth(parse_json(at_limit, "here")) == MAX_RECORD_DEPTH
    past = json.dumps({"a": _nested(MAX_RECORD_DEPTH)}).encode(encoding)
    with pytest.raises(VaultCorruptError, match=re.escape("here/k nests objects and lists")):
        parse_json(past, "here", "k")
    # many brackets (in strings, or side by side) but shallow: the walk runs and accepts it
    wide = {"s": "[" * 500, "l": [[i] for i in range(200)], "d": [{} for _ in range(200)]}
    assert parse_json(json.dumps(wide).encode(encoding), "here") == wide
    deep_list = json.dumps([_nested(MAX_RECORD_DEPTH)]).encode(encoding)
    with pytest.raises(VaultCorruptError, match=f"more than {MAX_RECORD_DEPTH} levels deep"):
        parse_json(deep_list, "here")


class _Small(enum.IntEnum):
    ONE = 1


_tricky = [
    0, 1, -1, True, False, MAX_EXTENT, MAX_EXTENT + 1, -(2**70), 2**70, 1.0, "1", None,
    _Small.ONE, np.int64(3), [1],
]  # fmt: skip


@pytest.mark.parametrize("minimum", [0, 1])
def test_the_int_rule_fast_paths_decide_as_the_rule(minimum: int) -> None:
    for value in _tricky:
        assert is_int(value, minimum) == _int_by_rule(value, minimum), value
    lists: list[list[Any]] = [
        [],
        [1, 2],
        [1, True],
        [True, 1],
        [0, 1],
        [1, MAX_EXTENT + 1],
        [1, 1.0],
        [1, "2"],
    ]
    lists += [[_Small.ONE, 2], [2, _Small.ONE], [np.int64(1)], [[1]], [2**64, 1]]
    lists += [[v] for v in _tricky] + [[1, 2, v] for v in _tricky]
    for values in lists:
        assert is_int_list(values, minimum) == all(_int_by_rule(v, minimum) for v in values)
    for not_a_list in [(1, 2), {1: 1}, "12", None, 1, np.array([1, 2])]:
        assert not is_int_list(not_a_list, minimum)


@settings(max_examples=100)
@given(values=st.lists(st.integers() | st.booleans() | st.floats(allow_nan=False), max_size=5))
def test_the_int_list_rule_on_any_list(values: list[Any]) -> None:
    assert is_int_list(values, 0) == all(_int_by_rule(v, 0) for v in values)


@pytest.mark.parametrize("size", [0, 1, 4095, 1 << 20, (1 << 20) + 1, 3 << 20])
def test_a_record_is_read_whole_whatever_its_size(tmp_path: Path, size: int) -> None:
    body = os.urandom(size)
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "zarr.json").write_bytes(body)
    location = FileLocation(tmp_path)
    assert location.read("k/zarr.json") == body
    assert location.read_many(["k/zarr.json", "absent", "k"]) == [body, None, None]


def test_a_record_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    with open(tmp_path / "big", "wb") as out:
        out.truncate(MAX_RECORD_BYTES + 1)
    with pytest.raises(
        VaultCorruptError, match=re.escape(f"big is corrupt ({MAX_RECORD_BYTES + 1}")
    ):
        FileLocation(tmp_path).read("big")
    with open(tmp_path / "edge", "wb") as out:
        out.truncate(MAX_RECORD_BYTES)
    assert FileLocation(tmp_path).read("edge") == bytes(MAX_RECORD_BYTES)


@pytest.mark.skipif(not Path("/proc/self/cmdline").is_file(), reason="needs Linux's /proc")
def test_a_record_whose_size_changed_since_it_was_opened_is_read_to_its_end() -> None:
    # a /proc file says it holds 0 bytes and holds more: the read goes on to its end
    assert os.stat("/proc/self/cmdline").st_size == 0
    assert (
        FileLocation(Path("/proc/self")).read("cmdline") == Path("/proc/self/cmdline").read_bytes()
    )
