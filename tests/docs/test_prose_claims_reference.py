"""The prose of the reference pages: docs/format.md (the on-disk format), docs/api/*.md (the
docstrings they render) and docs/benchmarks.md, where no other test pins the promise.

The other prose-claim files (``tests/docs/test_prose_claims_core.py``, ``..._guides.py``,
``tests/vault/test_format_claims.py``, ``tests/vault/test_format_spec.py``,
``tests/test_docstring_claims*.py``) cover most of these pages. This one takes what they
leave:

* format.md §10, "a reader MUST ignore object keys it does not know inside the manifest and
  the commit record": an addition with a valid digest reads as before, fingerprint and all;
* format.md §4.2, "a reader MUST check ... codecs (within the two differences of §4.1.3) ...
  and the chunk key encoding ... It MUST refuse an array that departs": an array whose chunk
  keys are written with another separator, in a vault whose manifest does not say every
  chunk is stored, and a blosc ``typesize`` that is not the item size (``tools/spec_reader.py``,
  the page's own reader, refuses both);
* format.md §5.1 and §10, "a dataset ``format`` other than 1" is refused: JSON ``true`` and
  ``1.0`` are other values (the manifest's ``format_version`` refuses them already);
* format.md §4.7, a tag name is "1 to 100 characters of letters, digits, ``.``, ``_`` and
  ``-``, starting with a letter or ``_``", and the Vault.tag docstring ("VaultArgumentError: a
  name that is not a valid tag"): a valid name ending in ``.__lock`` on a local vault;
* format.md §4.8.2 and §8.3 on the S3 test server: the lease and its keys, the fence, the
  writer's nonce in every array's metadata, arrays grown "to at least four times their length
  (and twice what the append needs), in whole chunks", and at close (§8.4) trimmed to exactly
  the committed length with the lease deleted;
* the ``Manifest`` docstring ("leaves: every leaf, sorted by path") against format.md §4.1.2
  (``leaves`` MUST list the leaves in leaf order);
* docs/benchmarks.md: every ``python tools/...`` command it gives is accepted by its script.

Data say where they belong (``obs = 1000 * row + t``). A test that exposes a bug is
``xfail(strict=True, raises=AssertionError)``; its reason says ``BUG:`` where the code is wrong
and ``DOC:`` where the page or docstring is.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import json
import re
import shlex
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from vault import (
    Dataset,
    Manifest,
    Vault,
    VaultArgumentError,
    VaultCorruptError,
    VaultError,
    parse_location,
)

ROOT = Path(__file__).resolve().parents[2]
ROWS = 2
EXAMPLE = {"obs": np.zeros(2, np.float32), "done": np.bool_(False)}
CHUNK: dict[str, Sequence[int]] = {"obs": [ROWS, 4, 2], "done": [ROWS, 4]}
LENGTHS = (5, 4)  # committed 9: two complete time chunks and a partly filled one


def data(t0: int, n: int) -> dict[str, np.ndarray]:
    """Timesteps ``[t0, t0 + n)`` of every row: obs says where it belongs, every 3rd ends."""
    t = np.arange(t0, t0 + n)[None, :]
    code = 1000 * np.arange(ROWS)[:, None] + t
    return {
        "obs": (code[..., None] + np.array([0.0, 0.5])).astype(np.float32),
        "done": np.broadcast_to(t % 3 == 2, (ROWS, n)).copy(),
    }


MODEL = data(0, sum(LENGTHS))


def digest(doc: dict[str, Any]) -> str:
    """format.md §6.2: SHA-256 of the canonical JSON without ``digest``, 32 hex digits."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def edit_record(path: Path, attribute: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change a manifest or commit record and give it its new digest, as a writer would."""

    def apply(doc: dict[str, Any]) -> None:
        record = doc["attributes"][attribute]
        change(record)
        record["digest"] = digest(record)

    edit_json(path, apply)


def refusal(read: Callable[[], Any]) -> tuple[BaseException | None, Any]:
    """``(error, None)`` when ``read`` raises, else ``(None, what it returned)``."""
    try:
        return None, read()
    except Exception as err:  # the caller asserts its type
        return err, None


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed vault with an episode index: 9 timesteps in chunks of 4, tagged."""
    where = tmp_path_factory.mktemp("reference") / "v"
    with Vault.create(where, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done") as v:
        t = 0
        for n in LENGTHS:
            v.append(data(t, n))
            t += n
        v.tag("both")
    return where


def copy_of(built: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(built, target)
    return target


def assert_model(got: dict[str, np.ndarray], where: str) -> None:
    for key, want in MODEL.items():
        np.testing.assert_array_equal(got[key], want, err_msg=f"{where}: {key}")


def drop_fill_chunks_stored(root: Path) -> None:
    """The manifest without its optional ``fill_chunks_stored`` (as a vault written before the
    flag has it, format.md §9): "a missing chunk may be one that held only fill values"."""
    edit_record(root / "zarr.json", "rlvault", lambda m: m.pop("fill_chunks_stored"))


# ------------------------------------------------------------------------- format.md §10
# "A reader MUST ignore object keys it does not know inside the manifest and the commit
# record (they are still covered by the digest), so that an addition that needs no new
# version (§9) stays readable." §9: "a reader that does not know them reads the vault
# correctly without them".
def test_unknown_keys_of_the_manifest_and_record_are_ignored(built: Path, tmp_path: Path) -> None:
    before = Vault.open(built)
    fingerprint, episodes = before.fingerprint(), before.episodes(include_open=True)
    root = copy_of(built, tmp_path, "later")
    edit_record(root / "zarr.json", "rlvault", lambda m: m.update(zz_later={"a": [1, 2.5]}))
    edit_record(root / "commit/zarr.json", "rlvault_commit", lambda r: r.update(zz_later="x"))
    edit_record(root / "history/1", "rlvault_commit", lambda r: r.update(zz_later=None))
    v = Vault.open(root)
    assert_model(v.read_numpy(), "latest")
    assert v.fingerprint() == fingerprint  # the content is the same: so is its name
    got = v.episodes(include_open=True)
    assert got.to_records() == episodes.to_records()
    pinned = Vault.open(root, at=1)  # history/1, with its own unknown key
    assert pinned.committed_length == LENGTHS[0]
    np.testing.assert_array_equal(pinned.read_numpy()["obs"], MODEL["obs"][:, : LENGTHS[0]])
    assert Vault.open(root, at="both").commit_id == before.commit_id


# ------------------------------------------------------------------------ format.md §4.2
# "A reader MUST check, before it reads the array, that data_type, chunk_grid, codecs
# (within the two differences of §4.1.3), fill_value ... and the chunk key encoding are those
# the manifest gives ... It MUST refuse an array that departs." §10: refuse "array metadata
# that departs from the manifest" ("raise an error naming the object, never return data").
def test_an_array_whose_chunk_key_encoding_departs_is_refused(built: Path, tmp_path: Path) -> None:
    root = copy_of(built, tmp_path, "encoding")
    drop_fill_chunks_stored(root)
    assert_model(Vault.open(root).read_numpy(), "without the flag")  # a sound vault so far
    encoding = {"name": "default", "configuration": {"separator": "."}}
    edit_json(root / "experience/obs/zarr.json", lambda a: a.update(chunk_key_encoding=encoding))
    err, got = refusal(lambda: Vault.open(root).read_numpy())
    assert isinstance(err, VaultCorruptError), (
        f"read {got['obs'][0, :3, 0].tolist() if got else None} (written "
        f"{MODEL['obs'][0, :3, 0].tolist()}), raised {err!r}"
    )
    assert "experience/obs" in str(err)


# §4.1.3: "The array metadata states the same chain with two differences that TensorStore
# makes: ... `blosc` has "typesize": <itemsize> added to its configuration. A reader comparing
# the two MUST allow exactly these."
def test_a_blosc_typesize_other_than_the_item_size_is_refused(built: Path, tmp_path: Path) -> None:
    root = copy_of(built, tmp_path, "typesize")
    meta = json.loads((root / "experience/obs/zarr.json").read_text())
    blosc = [c for c in meta["codecs"] if c["name"] == "blosc"]
    assert blosc
    assert blosc[0]["configuration"]["typesize"] == 4

    def eight(a: dict[str, Any]) -> None:
        [codec] = [c for c in a["codecs"] if c["name"] == "blosc"]
        codec["configuration"]["typesize"] = 8

    edit_json(root / "experience/obs/zarr.json", eight)
    err, _got = refusal(lambda: Vault.open(root).read_numpy())
    assert isinstance(err, VaultCorruptError), f"read the array, raised {err!r}"


# --------------------------------------------------------------- format.md §5.1 and §10
# §5.1: "`format` is the dataset format (1; a reader MUST refuse another)"; §10: refuse "a
# dataset `format` other than 1". §2: JSON numbers "keep the distinction between integers and
# floats", and the manifest's format_version already refuses 1.0 and true.
@pytest.fixture(scope="module")
def dataset_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reference-ds") / "ds"
    ds = Dataset.create(root, EXAMPLE, rows=ROWS, done_leaf="done")
    with ds.shard("a") as shard:
        shard.append(data(0, 5))
    return root


@pytest.mark.parametrize("value", [True, 1.0], ids=["true", "1.0"])
def test_a_dataset_format_that_is_not_the_integer_1_is_refused(
    dataset_root: Path, tmp_path: Path, value: Any
) -> None:
    root = tmp_path / "ds"
    shutil.copytree(dataset_root, root)
    assert Dataset.open(root).shards == ["a"]

    def change(doc: dict[str, Any]) -> None:
        doc["attributes"]["rlvault_dataset"]["format"] = value

    edit_json(root / "zarr.json", change)
    err, got = refusal(lambda: Dataset.open(root).shards)
    assert isinstance(err, VaultError), f"format {json.dumps(value)} opened, shards {got}"


# ------------------------------------------------------------------------ format.md §4.7
# "A name is 1 to 100 characters of letters, digits, `.`, `_` and `-`, starting with a letter
# or `_` (so it never looks like a commit id), and not `zarr.json`." Vault.tag: "Raises:
# VaultArgumentError: a name that is not a valid tag." vault.md: every error is a VaultError.
def test_a_valid_tag_name_ending_in_lock_is_made_or_refused_as_documented(
    built: Path, tmp_path: Path
) -> None:
    root = copy_of(built, tmp_path, "tags")
    v = Vault.open(root)
    name = "x.__lock"
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9._-]{0,99}", name)  # the page's rule
    err, made = refusal(lambda: v.tag(name))
    if err is not None:
        assert isinstance(err, VaultArgumentError), f"Vault.tag({name!r}) raised {err!r}"
        assert name in str(err)
        return
    assert made == v.commit_id
    assert Vault.open(root, at=name).commit_id == made
    assert v.tags()[name] == made


# ---------------------------------------------------------- format.md §4.8.2, §8.3, §8.4
def s3_get(loc: str, key: str) -> bytes | None:
    got = parse_location(loc).kvstore().read(key).result()
    return bytes(got.value) if got.state == "value" else None


def s3_json(loc: str, key: str) -> Any:
    raw = s3_get(loc, key)
    assert raw is not None, key
    return json.loads(raw)


def s3_keys(loc: str) -> list[str]:
    return sorted(bytes(k).decode() for k in parse_location(loc).kvstore().list().result())


HEX12, HEX32 = re.compile(r"[0-9a-f]{12}"), re.compile(r"[0-9a-f]{32}")


def test_an_s3_writer_leases_fences_grows_and_trims_as_the_page_says(s3_env: Any) -> None:
    """§4.8.2: the lease's keys, ``lock/zarr.json`` an empty group, the store check leaves
    nothing, the fence; §8.3: every array's metadata claimed with the writer's nonce, grown to
    at least four times its length and twice what the append needs, in whole chunks (the
    index in whole 8,192-episode chunks), kept where it fits; the fence kept; §8.4: trimmed to
    exactly ``L`` (``count``), the lease deleted; no ``trash/`` (local vaults only)."""
    loc = f"s3://{s3_env.bucket}/prose-reference-{uuid.uuid4().hex[:10]}/v"
    arrays = ["experience/obs", "experience/done", "episodes/bounds", "episodes/returns"]
    v = Vault.create(loc, EXAMPLE, rows=ROWS, chunk=CHUNK, done_leaf="done")
    try:
        lease = s3_json(loc, "lock/lease.json")
        assert set(lease) == {"writer", "nonce", "renewals", "seconds", "expires"}
        assert HEX32.fullmatch(lease["nonce"])
        assert lease["renewals"] >= 1
        assert {"pid", "host", "thread", "since"} <= set(lease["writer"])
        assert s3_json(loc, "lock/zarr.json") == {"zarr_format": 3, "node_type": "group"}
        assert "lock/conditional-write-check" not in s3_keys(loc)
        fence = s3_json(loc, "commit/zarr.json")["attributes"]["rlvault_commit"]["fence"]
        assert HEX32.fullmatch(fence)
        nonces, t = set(), 0
        for n in (5, 3, 9, 1):
            before = {k: s3_json(loc, f"{k}/zarr.json")["shape"][0 if "episodes" in k else 1]
                      for k in arrays}  # fmt: skip
            v.append(data(t, n))
            t += n
            for key in ("experience/obs", "experience/done"):
                meta = s3_json(loc, f"{key}/zarr.json")
                grown = meta["shape"][1]
                nonces.add(meta["attributes"]["rlvault_writer"])
                if before[key] >= t:
                    assert grown == before[key], (key, t)  # it fit: not grown
                else:
                    assert grown >= max(4 * before[key], 2 * t), (key, before[key], t, grown)
                    assert grown % 4 == 0, (key, grown)  # whole chunks
            for key in ("episodes/bounds", "episodes/returns"):
                meta = s3_json(loc, f"{key}/zarr.json")
                assert meta["shape"][0] % 8192 == 0
                nonces.add(meta["attributes"]["rlvault_writer"])
            record = s3_json(loc, "commit/zarr.json")["attributes"]["rlvault_commit"]
            assert record["fence"] == fence
            assert record["committed_length"] == t
        assert len(nonces) == 1
        assert HEX12.fullmatch(nonces.pop())
    finally:
        v.close()
    count = s3_json(loc, "commit/zarr.json")["attributes"]["rlvault_commit"]["episodes"]["count"]
    assert s3_json(loc, "experience/obs/zarr.json")["shape"] == [ROWS, t, 2]
    assert s3_json(loc, "experience/done/zarr.json")["shape"] == [ROWS, t]
    assert s3_json(loc, "episodes/bounds/zarr.json")["shape"] == [count, 4]
    assert s3_json(loc, "episodes/returns/zarr.json")["shape"] == [count]
    keys = s3_keys(loc)
    assert "lock/lease.json" not in keys
    assert not [k for k in keys if k.startswith("trash/")]
    got = Vault.open(loc).read_numpy()
    for key, want in data(0, t).items():
        np.testing.assert_array_equal(got[key], want, err_msg=key)


# ------------------------------------------------------- docs/api/vault.md: vault.Manifest
class Step(NamedTuple):
    zed: Any
    alpha: Any


def test_the_manifest_docstring_says_in_which_order_its_leaves_are(tmp_path: Path) -> None:
    with Vault.create(tmp_path / "v", Step(np.float32(0), np.int32(0)), rows=1) as v:
        names = [leaf.name for leaf in v.manifest.leaves]
        assert names == v.leaf_names == ["zed", "alpha"]  # leaf order, not sorted
    attributes = inspect.getdoc(Manifest) or ""
    [leaves] = [line for line in attributes.splitlines() if line.strip().startswith("leaves:")]
    assert "sorted by path" not in leaves, leaves


# --------------------------------------------------------------------- docs/benchmarks.md
# Every section "names the command": each `python tools/...` command of the page (and the
# flags its prose adds: `--quick` for a small run, 20 crash trials) is one its script takes.
EXTRA_COMMANDS = [
    "tools/bench_buffers.py --quick",
    "tools/bench_convert.py --quick --out results.json",
    "tools/crash_trials.py --trials 20",
]


class Parsed(Exception):
    """Raised by the patched ``parse_args`` once the arguments parsed: the script stops."""


def test_every_benchmark_command_of_the_page_is_one_its_script_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    commands = sorted(set(re.findall(r"`python (tools/[^`]+)`", page)))
    assert len(commands) >= 10, commands
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise Parsed(original(self, *args, **kwargs))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    refused = []
    for command in commands + EXTRA_COMMANDS:
        script, *argv = shlex.split(command)
        name = f"_prose_reference_{Path(script).stem}"
        spec = importlib.util.spec_from_file_location(name, ROOT / script)
        assert spec is not None, script
        assert spec.loader is not None, script
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        monkeypatch.setattr(sys, "argv", [script, *argv])
        main = module.main
        try:
            main(argv) if inspect.signature(main).parameters else main()
        except Parsed:
            continue
        except SystemExit as stop:  # argparse refused a flag
            refused.append(f"{command}: exit {stop.code}")
            continue
        refused.append(f"{command}: ran without parsing its arguments")
    assert not refused, refused
