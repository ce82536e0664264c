"""Vaults on object storage, against a real S3 server (SeaweedFS on loopback, started by the
``s3_server`` fixture in ``tests/conftest.py``): configuration, typed and bounded failures,
the writer lease with fencing (two processes racing, a writer that lost its lease, takeover
after a writer was killed), crash recovery, a server that dies during a write, readers in
other processes, derived vaults that appear whole, zarr-python + s3fs reading a vault, and the
CLI. The behaviour shared with every location kind is in ``test_location_conformance.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vault
from vault import Vault, VaultLockedError, parse_location
from vault.testing import ACCESS_KEY, SECRET_KEY, S3TestServer

sys.path.insert(0, str(Path(__file__).parent))
from _s3_child import EXAMPLE, ROWS, STEPS, block, expected

CHILD = str(Path(__file__).with_name("_s3_child.py"))


def fresh(server: Any, name: str = "v") -> str:
    return f"s3://{server.bucket}/t-{uuid.uuid4().hex[:12]}/{name}"


def child(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or dict(os.environ),
    )


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc``, reap it and close its pipes."""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float = 60) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if re.search(pattern, line):
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"child exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s")


# ----------------------------------------------------------------------------- configuration
def test_configuration_follows_the_aws_environment_and_storage_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1234/")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    loc = parse_location("s3://bucket/some/prefix")
    assert str(loc) == "s3://bucket/some/prefix"
    spec = loc.spec
    assert spec["endpoint"] == "http://127.0.0.1:1234"
    assert spec["aws_region"] == "eu-west-3"
    # the environment's keys in a private file named by them, as given keys are: a store
    # opened after the keys change in the environment uses the new ones (TensorStore shares
    # one resolved {"type": "environment"} among the open stores of a process)
    assert spec["aws_credentials"]["type"] == "profile"
    assert "env-secret-value" not in json.dumps(spec) + str(loc) + repr(loc)
    assert "env-secret-value" in Path(spec["aws_credentials"]["credentials_file"]).read_text()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rotated-secret-value")
    rotated = parse_location("s3://bucket/some/prefix").spec["aws_credentials"]
    assert "rotated-secret-value" in Path(rotated["credentials_file"]).read_text()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    assert spec["use_conditional_write"] is True
    assert spec["path"] == "some/prefix/"
    monkeypatch.setenv("AWS_REGION", "us-west-2")  # AWS_REGION wins over AWS_DEFAULT_REGION
    assert parse_location("s3://bucket/p").spec["aws_region"] == "us-west-2"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:4321")  # the S3-specific one
    assert parse_location("s3://bucket/p").spec["endpoint"] == "http://127.0.0.1:4321"

    given = parse_location(
        "s3://bucket/p",
        storage={
            "endpoint": "http://127.0.0.1:9999",
            "region": "ap-south-1",
            "access_key_id": "AKIAGIVEN",
            "secret_access_key": "given-secret-value",
            "retries": 1,
        },
    )
    spec = given.spec
    assert spec["endpoint"] == "http://127.0.0.1:9999"
    assert spec["aws_region"] == "ap-south-1"
    assert spec["aws_credentials"]["type"] == "profile"
    # the secret is in a private file, never in the spec, the name or the repr
    shown = json.dumps(spec) + str(given) + repr(given)
    assert "given-secret-value" not in shown
    assert "AKIAGIVEN" not in shown
    path = spec["aws_credentials"]["credentials_file"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert "given-secret-value" in Path(path).read_text()

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.setenv("AWS_PROFILE", "research")
    assert parse_location("s3://bkt/p").spec["aws_credentials"] == {
        "type": "profile",
        "profile": "research",
    }
    raw = {"driver": "s3", "bucket": "bkt", "path": "x/", "endpoint": "http://127.0.0.1:7"}
    assert str(parse_location(raw)) == "s3://bkt/x"
    assert parse_location(raw).spec["endpoint"] == "http://127.0.0.1:7"


@pytest.mark.parametrize(
    ("storage", "match"),
    [
        ({"endpont": "http://x"}, "unknown storage setting"),
        ({"endpoint": "127.0.0.1:9000"}, "must be an http:// or https:// URL"),
        ({"retries": -1}, "'retries' must be a number"),
        ({"lease_seconds": 0}, "'lease_seconds' must be a number"),
        ({"access_key_id": "only-the-key"}, "needs both 'access_key_id' and 'secret_access_key'"),
    ],
)
def test_bad_storage_settings_are_typed_errors(storage: dict[str, Any], match: str) -> None:
    with pytest.raises(vault.VaultLocationError, match=match):
        parse_location("s3://bucket/p", storage=storage)


def _serve(listener: socket.socket, answer: Any) -> None:
    """Accept connections on ``listener`` and pass each to ``answer`` (on a daemon thread)."""

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(Exception):
                answer(conn)

    threading.Thread(target=loop, daemon=True).start()


def test_an_https_endpoint_is_asked_in_tls_whether_it_answers(tmp_path: Path) -> None:
    """object-storage.md: an endpoint that accepts connections and never answers is
    ``VaultStorageError`` within ``connect_timeout``. For an ``https://`` endpoint the probe is
    a TLS handshake: a silent server is refused by name, and a server that answers it (here
    with a self-signed certificate, which TensorStore then refuses for itself) is not."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with socket.socket() as silent, socket.socket() as tls:
        for listener in (silent, tls):
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)

        def handshake(conn: socket.socket) -> None:
            # a TLS server that says nothing to bytes that do not open a TLS handshake (as
            # some do): only a probe that speaks TLS gets an answer from it
            if conn.recv(1, socket.MSG_PEEK) != b"\x16":
                while conn.recv(1 << 16):  # reads on, silent, until the client gives up
                    pass
                return
            with context.wrap_socket(conn, server_side=True) as secured:
                secured.recv(1)

        _serve(tls, handshake)

        def opened(listener: socket.socket) -> str:
            port = listener.getsockname()[1]
            storage = {"endpoint": f"https://127.0.0.1:{port}", "retries": 0,
                       "connect_timeout": 1}  # fmt: skip
            started = time.monotonic()
            with pytest.raises(vault.VaultError) as caught:
                Vault.open(f"s3://tls-{port}/p", storage=storage)
            assert time.monotonic() - started < 20
            return str(caught.value)

        assert "does not answer" in opened(silent)
        assert "does not answer" not in opened(tls)


def test_keys_changed_in_the_environment_are_used_while_a_vault_stays_open(
    s3_env: S3TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorStore shares one resolved ``{"type": "environment"}`` credential among the open
    stores of a process: a wrong secret set in the environment while a vault was open was
    never tried (the open one's keys were used). Each set of keys is its own credential."""
    url = f"s3://{s3_env.bucket}/env-keys-{uuid.uuid4().hex[:8]}/v"
    with Vault.create(url, {"x": np.zeros(2, np.float32)}, rows=1) as held:
        held.append({"x": np.ones((1, 3, 2), np.float32)})
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        with pytest.raises(vault.VaultAccessError, match="credentials were refused"):
            Vault.open(url)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_env.environment()["AWS_SECRET_ACCESS_KEY"])
        assert Vault.open(url).committed_length == 3


def test_failures_are_typed_fast_and_never_show_secrets(s3_env: S3TestServer) -> None:
    # an endpoint where nothing listens: the default retry policy would take ~15 minutes
    started = time.monotonic()
    with pytest.raises(vault.VaultStorageError, match="cannot reach the S3 endpoint"):
        Vault.open("s3://bkt/p", storage={"endpoint": "http://127.0.0.1:9"})
    assert time.monotonic() - started < 10
    wrong = {
        "endpoint": s3_env.endpoint,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": "not-the-secret",
    }
    with pytest.raises(vault.VaultAccessError, match="credentials were refused") as err:
        Vault.create(fresh(s3_env), EXAMPLE, rows=ROWS, storage=wrong)
    assert "not-the-secret" not in str(err.value)
    assert SECRET_KEY not in str(err.value)
    with pytest.raises(vault.VaultNotFoundError, match="'no-such-bucket' does not exist"):
        Vault.create("s3://no-such-bucket/p", EXAMPLE, rows=ROWS)
    with pytest.raises(vault.VaultNotFoundError, match="no vault at"):
        Vault.open(fresh(s3_env))
    assert time.monotonic() - started < 30


# ----------------------------------------------------------------------------- the lease
def test_two_processes_racing_for_the_lease_exactly_one_commits(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    races = 100
    root = fresh(s3_env, "race")
    for i in range(races):
        Vault.create(f"{root}/{i}", EXAMPLE, rows=ROWS).close()
    racers = [child("race", root, str(races), me, str(tmp_path)) for me in ("a", "b")]
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in racers) and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p in racers):  # one failed: the other would wait
            for p in racers:
                p.kill()
        time.sleep(0.1)
    outputs = [p.communicate(timeout=10) for p in racers]
    for p, (_, err) in zip(racers, outputs, strict=True):
        assert p.returncode == 0, err
    results = [dict(line.split() for line in out.splitlines()) for out, _ in outputs]
    for i in range(races):
        won = [r[str(i)] == "won" for r in results]
        assert sum(won) == 1, (i, won)
        v = Vault.open(f"{root}/{i}")
        assert v.committed_length == STEPS  # exactly one append landed
        winner = "ab"[won.index(True)]
        np.testing.assert_array_equal(v.read_numpy()["obs"], block(ord(winner))["obs"])


def test_a_writer_that_lost_its_lease_can_never_commit(s3_env: S3TestServer) -> None:
    loc = fresh(s3_env)
    old = Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done")
    old.append(block(0))
    assert vault.lock_holder(loc) is not None
    assert vault.break_lock(loc)  # `vault unlock`: the old writer is presumed dead
    new = Vault.open(loc, "a")  # takes the lease, then fences the commit record
    with pytest.raises(VaultLockedError, match="lost its lock"):
        old.append(block(99))
    with pytest.raises(VaultLockedError):  # and it stays refused
        old.append(block(98))
    new.append(block(1))
    new.append(block(2))
    new.close()
    old.close()  # nothing pending: closing gives up nothing (the lease is not its own)
    v = Vault.open(loc)
    assert v.committed_length == 3 * STEPS
    np.testing.assert_array_equal(v.read_numpy()["obs"], expected(3))
    assert vault.verify(loc).ok


def test_a_writer_whose_lease_was_broken_writes_no_data(s3_env: S3TestServer) -> None:
    """Each append sends its own lease check as it starts, so a writer whose lease was broken
    and taken over since its last commit PUTs no chunk at all (the new holder's data stays
    untouched), however soon after that commit it appends."""
    loc = fresh(s3_env)
    old = Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done")
    old.append(block(0))
    old.append(block(1))  # its commit sent a lease check that saw the lease held
    assert vault.break_lock(loc)
    new = Vault.open(loc, "a")
    new.append(block(2))
    kv = parse_location(loc).kvstore()
    before = {bytes(k): kv.read(k).result().stamp.generation for k in kv.list().result()}
    with pytest.raises(VaultLockedError, match="lost its lock"):
        old.append(block(99))
    after = {bytes(k): kv.read(k).result().stamp.generation for k in kv.list().result()}
    assert after == before  # not one object written or replaced
    new.close()
    np.testing.assert_array_equal(Vault.open(loc).read_numpy()["obs"], expected(3))


def test_a_stale_commit_after_a_takeover_is_refused_by_fencing(s3_env: S3TestServer) -> None:
    """The fence alone (no lease check): a writer whose commit-record generation is stale
    cannot replace the record, even if it believes it holds the lock."""
    loc = fresh(s3_env)
    old = Vault.create(loc, EXAMPLE, rows=ROWS)
    old.append(block(0))
    vault.break_lock(loc)
    new = Vault.open(loc, "a")
    new.append(block(1))
    lease = old._writer._lock  # type: ignore[union-attr]  # the test reaches past check()
    with pytest.raises(VaultLockedError, match=re.escape("replaced commit/zarr.json")):
        lease.replace("commit/zarr.json", b"{}")
    new.close()
    assert Vault.open(loc).committed_length == 2 * STEPS


def test_a_killed_writers_lease_expires_and_a_new_writer_appends_exactly(
    s3_env: S3TestServer,
) -> None:
    loc = fresh(s3_env)
    Vault.create(loc, EXAMPLE, rows=ROWS, storage={"lease_seconds": 2}).close()
    env = dict(os.environ)
    proc = child("writer", loc, "0", "3", env=env)
    wait_for_line(proc, r"committed 2")
    # the child opened with the default lease (30 s): kill it and see the lease refuse
    kill(proc)
    with pytest.raises(VaultLockedError, match="vault unlock"):
        Vault.open(loc, "a")
    v = Vault.open(loc)
    assert v.committed_length == 3 * STEPS
    np.testing.assert_array_equal(v.read_numpy()["obs"], expected(3))
    # a short lease: the next holder that dies frees the vault within seconds
    short = Vault.open(loc, "a", storage={"lease_seconds": 2}) if vault.break_lock(loc) else None
    assert short is not None
    short.append(block(3))
    del short  # dropped without close(): the renewal thread stops, the lease is released
    started = time.monotonic()
    while True:
        try:
            w = Vault.open(loc, "a")
            break
        except VaultLockedError:
            assert time.monotonic() - started < 10
            time.sleep(0.2)
    w.append(block(4))
    w.close()
    final = Vault.open(loc)
    np.testing.assert_array_equal(final.read_numpy()["obs"], expected(5))
    assert vault.verify(loc).ok


def test_sigkilled_writers_leave_the_last_commit_and_the_next_writer_continues(
    s3_env: S3TestServer,
) -> None:
    loc = fresh(s3_env)
    Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done", chunk={"obs": [ROWS, 4, 4]}).close()
    rng = np.random.default_rng(0)
    blocks = 0
    for _trial in range(4):
        proc = child("writer", loc, str(blocks), "50")
        wait_for_line(proc, r"committed")
        time.sleep(float(rng.uniform(0.0, 0.15)))  # kill at a random moment of the appends
        kill(proc)
        assert vault.break_lock(loc)  # the dead writer's lease (or wait for it to expire)
        v = Vault.open(loc)
        assert v.committed_length % STEPS == 0
        blocks = v.committed_length // STEPS
        assert blocks >= 1
        np.testing.assert_array_equal(v.read_numpy()["obs"], expected(blocks))
        report = vault.verify(loc)
        assert report.ok, report.problems
    for trial in range(3):  # killed inside the commit replacement: before or after the PUT
        proc = child("writer", loc, str(blocks), "50", str(blocks + 1 + trial))
        proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL
        vault.break_lock(loc)
        v = Vault.open(loc)
        assert v.committed_length // STEPS in (blocks + 1 + trial, blocks + 2 + trial)
        blocks = v.committed_length // STEPS
        np.testing.assert_array_equal(v.read_numpy()["obs"], expected(blocks))
        assert vault.verify(loc).ok
    with Vault.open(loc, "a") as w:
        w.append(block(blocks))
    np.testing.assert_array_equal(Vault.open(loc).read_numpy()["obs"], expected(blocks + 1))


def test_readers_in_other_processes_see_new_commits(s3_env: S3TestServer) -> None:
    loc = fresh(s3_env)
    w = Vault.create(loc, EXAMPLE, rows=ROWS)
    w.append(block(0))
    reader = child("reader", loc, str(6 * STEPS))
    wait_for_line(reader, r"length 3")
    for k in range(1, 6):
        w.append(block(k))
        time.sleep(0.05)
    w.close()
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert f"length {6 * STEPS}" in out


# ----------------------------------------------------------------------------- server faults
def test_a_server_killed_during_writes_fails_them_in_bounded_time_and_loses_nothing_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = S3TestServer(tmp_path / "own-server", stop_timeout=15).start()
    try:
        for key, value in server.environment().items():
            monkeypatch.setenv(key, value)
        loc = f"s3://{server.bucket}/faults/v"
        storage = {"retries": 1}
        w = Vault.create(loc, EXAMPLE, rows=ROWS, storage=storage)
        for k in range(3):
            w.append(block(k))
        server.kill()
        started = time.monotonic()
        with pytest.raises(vault.VaultStorageError, match="did not answer"):
            w.append(block(3))
        assert time.monotonic() - started < 30
        server.start()  # same ports, same data
        w.append(block(3))  # the same writer continues once the store is back
        w.close()
        v = Vault.open(loc)
        np.testing.assert_array_equal(v.read_numpy()["obs"], expected(4))
        assert vault.verify(loc).ok
    finally:
        server.stop()


# ----------------------------------------------------------------------------- derived vaults
def test_derived_vaults_between_disk_and_s3_and_interrupted_builds(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    src = fresh(s3_env, "src")
    with Vault.create(src, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        for k in range(4):
            v.append(block(k))
    local = vault.derive_slice(src, tmp_path / "local", start=STEPS)
    np.testing.assert_array_equal(local.read_numpy()["obs"], expected(4)[:, STEPS:])
    back = fresh(s3_env, "back")
    again = vault.combine([tmp_path / "local", src], back)
    assert again.committed_length == 7 * STEPS
    assert vault.verify(back).ok

    dest = fresh(s3_env, "dest")
    proc = child("derive-dies", src, dest)
    proc.communicate(timeout=120)
    assert proc.returncode == 9
    assert vault.lock_holder(dest) is not None  # its lease runs on: it might be alive
    with pytest.raises(vault.VaultLockedError, match="vault unlock"):  # named, with the way out
        vault.derive_slice(src, dest, rows=[0])
    assert vault.break_lock(dest)  # as after the lease expires
    parent = dest.rsplit("/", 1)[0]
    assert vault.find_vaults(parent) == []  # never listed as a vault
    with pytest.raises(vault.VaultNotFoundError):
        Vault.open(dest)
    # (it died before its first commit: a Vault.create there would take it over, as a build
    # does; tests/vault/test_create_interrupted.py)
    out = vault.derive_slice(src, dest, rows=[0])  # the next build clears it
    np.testing.assert_array_equal(out.read_numpy()["obs"], expected(4)[:1])
    assert [f.location for f in vault.find_vaults(parent)] == [dest]


# ----------------------------------------------------------------------------- other readers
def test_zarr_python_with_s3fs_reads_every_leaf(s3_env: S3TestServer) -> None:
    zarr = pytest.importorskip("zarr")  # a core dependency: always there
    loc = fresh(s3_env)
    with Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done") as v:
        for k in range(3):
            v.append(block(k))
    url = loc.replace("s3://", "s3://", 1)
    storage_options = {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "client_kwargs": {"endpoint_url": s3_env.endpoint, "region_name": "us-east-1"},
    }
    group = zarr.open_group(url, mode="r", storage_options=storage_options)
    length = group["commit"].attrs["rlvault_commit"]["committed_length"]
    assert length == 3 * STEPS
    ours = Vault.open(loc).read_numpy()
    for name in ("obs", "done"):
        theirs = np.asarray(group[f"experience/{name}"][:, :length])
        np.testing.assert_array_equal(theirs, ours[name])


# ----------------------------------------------------------------------------- the CLI
def test_cli_lists_inspects_verifies_and_unlocks_s3_vaults(
    s3_env: S3TestServer, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from vault.cli.app import app

    loc = fresh(s3_env, "cli")
    writer = Vault.create(loc, EXAMPLE, rows=ROWS, done_leaf="done")
    writer.append(block(0))
    runner = CliRunner()
    parent = loc.rsplit("/", 1)[0]
    listed = runner.invoke(app, ["ls", parent, "--json"])
    assert listed.exit_code == 0, listed.output
    assert loc in listed.output
    info = runner.invoke(app, ["info", loc, "--json"])
    assert info.exit_code == 0, info.output
    verified = runner.invoke(app, ["verify", loc])
    assert verified.exit_code == 0, verified.output
    assert "sound" in verified.output
    refused = runner.invoke(app, ["unlock", loc])  # not a terminal, no --yes: nothing done
    assert refused.exit_code == 1
    assert "pass --yes" in refused.output
    assert vault.lock_holder(loc) is not None
    broken = runner.invoke(app, ["unlock", loc, "--yes", "--json"])
    assert broken.exit_code == 0, broken.output
    doc = json.loads(broken.stdout)
    assert doc["path"] == loc
    assert doc["broken"] is True
    assert doc["holder"]["pid"] == os.getpid()
    assert vault.lock_holder(loc) is None
    again = runner.invoke(app, ["unlock", loc, "--yes"])
    assert again.exit_code == 0, again.output
    assert "no writer lock was held" in again.output
    with pytest.raises(VaultLockedError):  # its append's own lease check: docs/format.md 8.3
        writer.append(block(1))
    nothing = runner.invoke(app, ["unlock", "/tmp", "--yes"])  # a folder, not a vault
    assert nothing.exit_code == 2
    assert "not a vault" in nothing.output
    Vault.create(tmp_path / "local", EXAMPLE, rows=ROWS).close()
    local = runner.invoke(app, ["unlock", str(tmp_path / "local"), "--yes"])
    assert local.exit_code == 1
    assert "no lock to break" in local.output
