"""Soak test: a writer appending as fast as it can, four readers checking every value, the
writer SIGKILLed at random moments and resumed, the disk filled and freed.

    python tools/soak.py --minutes 30 --location file
    python tools/soak.py --minutes 30 --location s3

Processes (all real, all through the public API):

* **writer**: fills a ring buffer (a ``buffers`` trajectory-buffer state held in numpy, 4 rows
  of 512 timesteps) with deterministic content and saves it with ``write(state,
  block=False|True, on_overrun="save_surviving", new_buffer=True)``; now and then it adds more
  than the buffer holds (a seam that records the lost timesteps) or appends a block with
  ``append(..., continues=False)`` (a restart seam). Episodes end where ``done`` is set. Every
  ``--generation-steps`` committed timesteps it closes the vault and starts the next
  *generation* (a new vault), so that a small disk holds the run; old generations are deleted
  once no reader uses them.
* **tip** reader: ``refresh()`` and reads the newest timesteps; the committed length never
  goes back.
* **pins** reader: remembers commits it saw (id, length, a range it read) and reopens them
  with ``Vault.open(path, at=id)``: same length, same values, whatever was appended since.
* **stream** reader: ``as_dataset`` batches (shuffled, sometimes ``episode_aware``); every
  sequence is checked where its ``row`` and ``start`` say it comes from.
* **episodes** reader: ``episodes(include_open=True)`` against the ``done`` and ``reward``
  leaves read back: every ``done`` ends exactly one episode, starts follow the previous end
  or a seam, returns are the sums of rewards.
* the **conductor** (this process): SIGKILLs the writer at random moments (and restarts it:
  it resumes with ``Vault.open(path, "a")``; on S3 it first breaks the dead writer's lease),
  fills the disk with a ballast file until the writer reports a full disk, then frees it
  (``--location file`` on a tmpfs of ``--disk-mib`` that it mounts where the machine allows
  it: root, Linux; otherwise it says so and runs without disk-full events), and at the end
  stops everything, runs ``vault.verify`` on the last generations and checks them whole.

Content is a pure function of (row, source timestep): the source timestep of stored
timestep ``t`` is ``t`` plus the timesteps lost at the vault's seams at or before ``t``, so a
seam that records a wrong count shows as wrong values. Every disagreement is printed as an
inconsistency and makes the exit status 1. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _argtypes import non_negative_float, out_file, positive_float, positive_int
from _soak_roles import (
    ROLES,
    ROWS,
    Board,
    Reader,
    differences,
    expected,
    generation_location,
    run_writer,
)


# ------------------------------------------------------------------------------ conductor
def _mount_tmpfs(path: Path, mib: int) -> str | None:
    """Mount a tmpfs of ``mib`` MiB at ``path``; None when done, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    if sys.platform != "linux":
        return f"tmpfs needs Linux (this is {sys.platform})"
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"mount failed: {err}"
    return (
        None if done.returncode == 0 else f"mount failed: {done.stderr.strip() or done.returncode}"
    )


class Conductor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(args.workdir or tempfile.mkdtemp(prefix="rlvault-soak-")).absolute()
        self.board = Board(self.work / "board")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills = 0
        self.fills = 0
        self.deleted_steps = 0
        self.deleted: set[int] = set()
        self.server: Any = None
        self.disk: Path | None = None
        self.mounted = False
        self.notes: list[str] = []

    # -- setup
    def setup(self) -> None:
        if self.args.location == "s3" and self.args.s3_url:
            self.args.location_url = self.args.s3_url.rstrip("/")  # the environment's server
            self.notes.append(
                "disk-full events: none on S3 (the server's disk is not the writer's)"
            )
            return
        if self.args.location == "s3":
            from vault.testing import S3TestServer

            self.server = S3TestServer(self.work / "s3", stop_timeout=30).start()
            os.environ.update(self.server.environment())
            self.args.location_url = f"s3://{self.server.bucket}/soak"
            self.notes.append(
                "disk-full events: none on S3 (the server's disk is not the writer's)"
            )
            return
        self.disk = self.work / "disk"
        why = _mount_tmpfs(self.disk, self.args.disk_mib)
        self.mounted = why is None
        if why is not None:
            self.notes.append(f"no tmpfs ({why}): running on {self.disk} without disk-full events")
            print(f"soak: {self.notes[-1]}", flush=True)
        self.args.location_url = str(self.disk / "vaults")

    def spawn(self, role: str) -> None:
        argv = [
            sys.executable,
            str(Path(__file__).absolute()),
            "--role",
            role,
            "--location",
            self.args.location,
            "--workdir",
            str(self.work),
            "--seed",
            str(self.args.seed),
            "--generation-steps",
            str(self.args.generation_steps),
            "--url",
            self.args.location_url,
        ]
        log = (self.work / f"{role}.log").open("ab")
        self.procs[role] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy()
        )
        log.close()

    # -- events
    def kill_writer(self) -> None:
        proc = self.procs["writer"]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.kills += 1
        else:
            self.board.report(
                "conductor",
                f"the writer had exited by itself (status {proc.returncode}): see writer.log",
            )
        self.spawn("writer")

    def writer_working(self) -> bool:
        """Whether the writer running now has written since it started (under load its start,
        importing JAX, can take seconds: a kill before its first write would test nothing)."""
        alive = self.board.get("writer-alive", {})
        return alive.get("pid") == self.procs["writer"].pid and alive.get("writes", 0) > 0

    def fill_disk(self) -> None:
        """Fill the disk with a ballast file, wait until the writer reports a full disk (at
        most 10 s), free it."""
        assert self.disk is not None
        ballast = self.disk / "ballast"
        self.board.put("ballast", True)
        seen = self.board.get("disk_full_seen", 0.0)
        try:
            fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                for size in (1 << 20, 4096, 1):
                    with contextlib.suppress(OSError):
                        while True:
                            os.write(fd, b"\0" * size)
            finally:
                os.close(fd)
            deadline = time.time() + 10
            while time.time() < deadline and self.board.get("disk_full_seen", 0.0) == seen:
                time.sleep(0.05)
        finally:
            ballast.unlink(missing_ok=True)
            self.board.put("ballast", False)
        self.fills += 1

    def collect(self) -> None:
        """Delete generations no reader uses any more (keeping the two newest)."""
        gen = self.board.get("generation", 0)
        using = [self.board.get(f"using-{role}", 0) for role in ROLES]
        for old in range(min([gen - 1, *using])):
            if old in self.deleted:
                continue
            self.deleted_steps += self._length(old)
            self._delete(old)
            self.deleted.add(old)

    def _length(self, gen: int) -> int:
        from vault import Vault

        try:
            return int(
                Vault.open(generation_location(self.args.location_url, gen)).committed_length
            )
        except Exception as err:
            self.board.report("conductor", f"generation {gen}: {type(err).__name__}: {err}")
            return 0

    def _delete(self, gen: int) -> None:
        where = generation_location(self.args.location_url, gen)
        if self.args.location == "file":
            shutil.rmtree(where, ignore_errors=True)
            return
        import tensorstore as ts

        from vault import parse_location

        kv = ts.KvStore.open(parse_location(where).spec).result()
        kv.delete_range(ts.KvStore.KeyRange("", "")).result()

    # -- run
    def run(self) -> int:
        # SIGTERM (a scheduler, `kill`): stop the processes and unmount as at the end
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        self.setup()
        started = time.time()
        end = started + self.args.minutes * 60
        try:
            self.spawn("writer")
            for role in ROLES:
                self.spawn(role)
            next_kill = time.time() + self.rng.uniform(1, 2)
            next_fill = time.time()  # the first event: a full disk
            while time.time() < end:
                time.sleep(0.05)
                now = time.time()
                for role in ROLES:
                    if self.procs[role].poll() is not None:
                        self.board.report(
                            "conductor",
                            f"reader {role} exited ({self.procs[role].returncode}): see {role}.log",
                        )
                        self.spawn(role)
                if self.procs["writer"].poll() is not None:  # it failed by itself
                    self.kill_writer()
                if (
                    self.mounted
                    and self.args.fill_every
                    and now >= next_fill
                    and self.writer_working()
                ):
                    self.fill_disk()
                    next_fill = time.time() + self.rng.uniform(0.5, 1.5) * self.args.fill_every
                if self.args.kill_every and now >= next_kill and self.writer_working():
                    self.kill_writer()
                    next_kill = now + self.rng.uniform(0.2, 1.8) * self.args.kill_every
                self.collect()
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            summary = self.finish(time.time() - started)
        finally:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            if self.server is not None:
                self.server.stop()
            if self.mounted and self.disk is not None and not self.args.keep:
                subprocess.run(["umount", str(self.disk)], check=False, capture_output=True)
            if not self.args.keep:
                shutil.rmtree(self.work, ignore_errors=True)
        return 1 if summary["inconsistencies"] else 0

    def finish(self, seconds: float) -> dict[str, Any]:
        """Check the generations left whole (verify, every value), print and return the
        figures."""
        from vault import Vault, verify

        gen = self.board.get("generation", 0)
        kept = [g for g in range(gen + 1) if g not in self.deleted]
        written = self.deleted_steps
        for g in kept:
            where = generation_location(self.args.location_url, g)
            try:
                vault = Vault.open(where)
            except Exception as err:
                if g == gen and type(err).__name__ == "VaultNotFoundError":
                    continue  # killed while creating it
                self.board.report("final", f"{where}: {type(err).__name__}: {err}")
                continue
            written += vault.committed_length
            report = verify(where)
            if not report.ok:
                self.board.report(
                    "final", f"verify {where}: {[str(p) for p in report.problems][:3]}"
                )
            data = vault.read_numpy()
            problems = differences(
                data, expected(vault.seams, np.arange(ROWS), 0, vault.committed_length)
            )
            if problems:
                self.board.report("final", f"{where}: {'; '.join(problems)}")
        readers = {role: self.board.get(f"reader-{role}", {}) for role in ROLES}
        writer = self.board.get("writer", {})
        bad = self.board.inconsistencies()
        summary = {
            "location": self.args.location,
            "minutes": round(seconds / 60, 2),
            "timesteps_written": written,
            "rows": ROWS,
            "generations": gen + 1,
            "reads_checked": sum(r.get("reads", 0) for r in readers.values()),
            "values_checked": sum(r.get("values", 0) for r in readers.values()),
            "reads_by_reader": {k: v.get("reads", 0) for k, v in readers.items()},
            "kills": self.kills,
            "writer_restarts": writer.get("restarts", 0),
            "disk_full_events": self.fills,
            "disk_full_errors_survived": writer.get("disk_full", 0),
            "overrun_seams": writer.get("seams", 0),
            "restart_seams": writer.get("restart_seams", 0),
            "inconsistencies": len(bad),
            "notes": self.notes,
        }
        for line in bad:
            print(f"INCONSISTENCY {line}")
        width = max(map(len, summary))
        for key, value in summary.items():
            print(f"{key:<{width}}  {value}")
        if self.args.json:
            Path(self.args.json).write_text(
                json.dumps({**summary, "inconsistency_lines": bad}, indent=1)
            )
        return summary


def _s3_url(text: str) -> str:
    """``s3://bucket[/prefix]``: anything else is an argparse error (never a local folder)."""
    bucket = text[len("s3://") :].split("/", 1)[0] if text.startswith("s3://") else ""
    if not bucket:
        raise argparse.ArgumentTypeError(f"must be an s3://bucket/prefix URL, got {text!r}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=positive_float, default=1.0, help="how long to run (default 1)"
    )
    parser.add_argument(
        "--location", choices=("file", "s3"), default="file", help="where the vaults are"
    )
    parser.add_argument("--seed", type=int, default=0, help="the conductor's random seed")
    parser.add_argument(
        "--generation-steps",
        type=positive_int,
        default=20_000,
        help="committed timesteps per vault before the next generation (default 20000)",
    )
    parser.add_argument(
        "--disk-mib",
        type=positive_int,
        default=64,
        help="size of the tmpfs of --location file (default 64)",
    )
    parser.add_argument(
        "--kill-every",
        type=non_negative_float,
        default=4.0,
        help="mean seconds between kills of the writer (0: none)",
    )
    parser.add_argument(
        "--fill-every",
        type=non_negative_float,
        default=10.0,
        help="mean seconds between disk-full events (0: none)",
    )
    parser.add_argument(
        "--workdir", default=None, help="a folder for the run (default: a new temporary one)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--json", type=out_file, default=None, help="write the figures to this file"
    )
    parser.add_argument(
        "--s3-url",
        type=_s3_url,
        default=None,
        help="with --location s3: use this s3://bucket/prefix on the server the AWS_* "
        "environment names instead of starting a SeaweedFS server",
    )
    parser.add_argument("--role", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.s3_url is not None and args.location != "s3":
        parser.error("--s3-url needs --location s3")
    args.storage = None
    if args.role is None:
        return Conductor(args).run()
    board = Board(Path(args.workdir) / "board")
    args.location = args.url
    if args.role == "writer":
        run_writer(args, board)
    else:
        Reader(args.role, args, board).loop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
