"""Shared CLI plumbing: consoles, exit codes, JSON output, range parsing, progress bars.

Only the standard library, typer, rich and the ``vault`` package itself (whose ``__init__``
loads only the error classes) are imported here; numpy, TensorStore and ``vault.Vault`` are
imported inside the functions that need them, so ``vault --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from vault import VaultAccessError, VaultCorruptError, VaultError, VaultNotFoundError

if TYPE_CHECKING:
    from vault import Dataset, Vault

PathArg = Annotated[
    str,
    typer.Argument(metavar="PATH", help="Vault (or dataset root) path or URL.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard",
        metavar="NAME",
        help="PATH is a dataset's root: use just this shard (a vault) of it.",
        show_default=False,
    ),
]

EXIT_OTHER = 1
EXIT_USAGE = 1  # typer's 2 is this command's "not found"
EXIT_NOT_FOUND = 2
EXIT_CORRUPT = 3
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one line on stderr with an exit code (no traceback)."""

    def __init__(self, message: str, code: int = EXIT_OTHER) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_OTHER) -> NoReturn:
    raise CliError(message, code)


def stdout() -> Console:
    """The console of a command's output. Into a pipe or a file it never wraps a line (a path
    split across lines cannot be pasted back; rich would wrap at 80 columns there), unless
    ``COLUMNS`` sets a width."""
    console = Console(highlight=False)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(highlight=False, soft_wrap=True, width=PIPE_WIDTH)


PIPE_WIDTH = 4096
"""Columns of a command's output into a pipe: as wide as any line it prints."""


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def one_line(err: BaseException | str) -> str:
    return " ".join(str(err).split())


def say_error(message: str) -> None:
    """``vault: <message>`` on stderr, as plain text (no markup, one line)."""
    sys.stderr.write(f"vault: {one_line(message)}\n")
    sys.stderr.flush()


def exit_code_of(err: BaseException) -> int | None:
    """The exit code of an expected failure (by the error's type), or ``None`` for an
    unexpected exception (a bug).

    ``VaultNotFoundError`` and ``VaultAccessError`` (not readable: no permission, a read-only
    file system) 2, ``VaultCorruptError`` 3; every other ``VaultError`` 1, among them
    ``VaultVersionError`` (a newer format: the message says to upgrade rlvault; the vault is
    not corrupt), ``VaultLocationError`` (a location kind that is not supported, or that
    cannot do what was asked) and ``VaultStorageError`` (a full disk, a file in the way).
    """
    if isinstance(err, CliError):
        return err.code
    if isinstance(err, (VaultNotFoundError, VaultAccessError)):
        return EXIT_NOT_FOUND
    if isinstance(err, VaultCorruptError):
        return EXIT_CORRUPT
    if isinstance(err, VaultError):
        return EXIT_OTHER
    if isinstance(err, FileNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(err, OSError):
        return EXIT_OTHER
    return None


def typed_storage_error(err: BaseException) -> VaultError | None:
    """A storage failure that reached the command untyped (an ``OSError``, or a TensorStore
    error the OS caused) as the library's typed error naming the path; None for anything
    else."""
    if isinstance(err, VaultError) or not isinstance(err, (OSError, ValueError)):
        return None
    from vault import storage_error

    return storage_error(err, None, None)


def plain(value: Any) -> Any:
    """``value`` with numpy scalars/arrays as Python values and NaN/Inf as ``None`` (JSON)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(plain(doc), indent=2, allow_nan=False) + "\n")


def count(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``count(1, "row")`` is ``"1 row"``, ``count(3,
    "row")`` is ``"3 rows"``; ``many`` is an irregular plural (``count(2, "leaf", "leaves")``)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def shards_text(n: int) -> str:
    """``"1 shard"``, ``"3 shards"``."""
    return count(n, "shard")


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{int(n)} B"
    size, unit = float(n) / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def parse_span(text: str | None, length: int, what: str) -> tuple[int, int]:
    """``"a:b"`` (either side optional, negative counts from the end) or ``"n"`` (just ``n``)
    as a half-open range inside ``[0, length)``.

    ``what`` is the option (``--time``, ``--rows``); each message says what is wrong and
    what to pass instead.
    """
    if text is None:
        return 0, length
    raw = text.strip()
    unit = "rows" if what == "--rows" else "timesteps"
    try:
        if ":" in raw:
            lo_text, _, hi_text = raw.partition(":")
            lo = int(lo_text) if lo_text.strip() else 0
            hi = int(hi_text) if hi_text.strip() else length
            lo = lo + length if lo < 0 else lo
            hi = hi + length if hi < 0 else hi
        else:
            lo = int(raw)
            lo = lo + length if lo < 0 else lo
            hi = lo + 1
    except ValueError:
        fail(f"{what} must look like 'a:b', 'a:', ':b' or 'n' (integers), got {text!r}")
    if 0 <= hi < lo <= length:
        fail(
            f"{what} {text!r}: the start ({lo}) is after the stop ({hi}); "
            f"put the smaller index first, e.g. {what} {hi}:{lo}"
        )
    if not 0 <= lo <= hi <= length:
        fail(
            f"{what} {text!r} is outside the vault's {length} {unit} [0, {length}); "
            f"pick a range inside it, e.g. {what} 0:{length} (negative numbers count from the end)"
        )
    return lo, hi


def parse_rows(text: str | None, rows: int) -> list[int] | None:
    """``"0,2,5"``, ``"1:3"`` or ``"4"`` as a list of row indices (``None``: every row)."""
    if text is None:
        return None
    if ":" in text:
        lo, hi = parse_span(text, rows, "--rows")
        if lo == hi:
            fail(f"--rows {text!r} selects no rows")
        return list(range(lo, hi))
    try:
        picked = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"--rows must look like '0,2,5' or '1:3', got {text!r}")
    picked = [r + rows if r < 0 else r for r in picked]
    bad = [r for r in picked if not 0 <= r < rows]
    if bad or not picked:
        fail(
            f"--rows {text!r}: rows must be in [0, {rows}) (the vault has {count(rows, 'row')}); "
            f"pick rows inside it, e.g. --rows 0 or --rows 0:{rows}"
        )
    return picked


def pin_of(text: str | None) -> int | str | None:
    """A ``--at`` value: a commit number as an int, anything else (an id, a tag) as given."""
    if text is None:
        return None
    # ASCII digits only: str.isdigit() also takes '²' or '①', which int() refuses
    return int(text) if text.isascii() and text.isdigit() else text


def open_vault(path: str, at: str | None = None) -> Vault:
    """Open a vault read-only, at its latest commit or at ``at`` (``--at``: a commit number,
    id or tag). The library validates its metadata (a malformed manifest is
    ``VaultCorruptError``, a newer format ``VaultVersionError``); a local path that is not a
    vault is refused first by :func:`check_vault_path`."""
    from vault import Vault

    check_vault_path(path)
    return Vault.open(path) if at is None else Vault.open(path, at=pin_of(at))


def open_dataset(path: str, at: str | None = None) -> Dataset:
    """The dataset at ``path``; with ``at`` (``--at TAG``), as that tag pins it."""
    from vault import Dataset

    if at is not None and re.fullmatch(r"\d+(-[0-9a-f]+)?", at):
        fail(
            f"--at {at}: a dataset is pinned by a tag (`vault tag {path} NAME` tags every "
            "shard); a commit number or id is one shard's: pass the shard, "
            "DATASET/shards/NAME, instead"
        )
    return Dataset.open(path, at=at, write_catalog=False)


def open_source(path: str, shard: str | None = None, at: str | None = None) -> Vault | Dataset:
    """The vault at PATH, or, for a dataset's root, the dataset (with ``--shard NAME``, its
    shard ``NAME``, a vault), at ``at`` where given (``--at``). A ``--shard`` with a vault,
    or a shard the dataset does not have, is refused in one line."""
    from vault import is_dataset

    check_vault_path(path)
    if not is_dataset(path):
        if shard is not None:
            fail(f"--shard picks a shard of a dataset, but {path} is a vault; leave --shard out")
        return open_vault(path, at)
    dataset = open_dataset(path, at)
    if shard is None:
        return dataset
    if shard not in dataset.shards:
        have = ", ".join(dataset.shards) or "none yet"
        fail(
            f"{path}: no shard {shard!r} in this dataset (its shards: {have}; "
            f"`vault ls {path}` lists them)"
            if at is None
            else f"{path}: shard {shard!r} is not in tag {at!r} (the tag's shards: {have})",
            EXIT_NOT_FOUND,
        )
    return dataset.vault(shard)


def leaf_names(location: str, have: list[str], wanted: list[str] | None) -> list[str]:
    """The leaves ``--leaf`` names (all without it), refused in one line if unknown."""
    names = list(wanted) if wanted else list(have)
    unknown = [n for n in names if n not in have]
    if unknown:
        fail(f"{location}: unknown leaves {unknown}; the vault has {have}")
    return names


@contextlib.contextmanager
def in_shard(name: str) -> Iterator[None]:
    """A selection refused for one shard of a dataset names the shard (and --shard)."""
    try:
        yield
    except CliError as err:
        raise CliError(
            f"shard {name!r}: {err}; or choose one shard with --shard NAME", err.code
        ) from None


def check_vault_path(path: str) -> None:
    """For a local path, tell apart (each with what to do, exit 2) a path that does not
    exist, a regular file, and a folder that is not a vault (no ``zarr.json``). Anything
    else (another location kind, a folder with a ``zarr.json``, one that cannot be read) is
    left to the library, which names the problem itself."""
    folder = local_path(path)
    if folder is None:
        return
    if not os.path.lexists(folder):
        fail(
            f"{path}: no such file or directory; check the path "
            "(`vault ls DIR` lists the vaults under a folder)",
            EXIT_NOT_FOUND,
        )
    if folder.is_file():
        fail(
            f"{path} is a file, not a vault (a vault is a folder holding zarr.json); "
            "pass the vault's folder",
            EXIT_NOT_FOUND,
        )
    readable = folder.is_dir() and os.access(folder, os.R_OK | os.X_OK)
    if readable and not (folder / "zarr.json").exists():
        fail(
            f"{path} is a folder but not a vault (no zarr.json in it); "
            f"`vault ls {path}` lists the vaults under it",
            EXIT_NOT_FOUND,
        )


def local_path(location: str) -> Path | None:
    """The directory of a location on the local file system (a path or ``file://`` URL),
    ``None`` for any other kind; ``VaultLocationError`` for a location that is not supported.

    The CLI checks a local destination or search folder itself (it must not exist, it must
    be a directory), before the library is asked to do anything.
    """
    from vault import parse_location

    spec = parse_location(location).spec
    return Path(spec["path"]) if spec.get("driver") == "file" else None


def local_out(text: str, option: str = "--out") -> Path:
    """The local file a command writes (``option``): a path or a ``file://`` URL; a URL of
    another kind is refused in one line (these files are written to this machine only)."""
    if "://" not in text:
        return Path(text)  # as typed: the messages show it so
    path = local_path(text)  # a URL, parsed as every location is
    if path is None:
        fail(f"{option} {text}: this command writes a local file; give a path on this machine")
    return path


def natural_width(console: Console, renderable: Any) -> int:
    """The width ``renderable`` takes when nothing has to wrap (however narrow the console)."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(1 << 16), renderable).maximum


ProgressFn = Callable[[int, int], None]


@contextlib.contextmanager
def progress_bar(description: str, *, bytes_unit: bool = False) -> Iterator[ProgressFn]:
    """A rich progress bar on stderr fed ``(done, total)``; nothing when stderr is not a
    terminal (scripts and pipes get clean output)."""
    console = stderr()
    if not console.is_terminal:
        yield _ignore
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    counter = DownloadColumn() if bytes_unit else MofNCompleteColumn()
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        counter,
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task(description, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _ignore(done: int, total: int) -> None:
    del done, total


def exit_with(code: int) -> NoReturn:
    raise typer.Exit(code)


def print_titled(title: str, table: Any, console: Console | None = None) -> None:
    """``table`` under ``title`` (rich markup) on a line of its own. A table wraps its own
    title to the table's width, which splits a long path above a narrow table even on a wide
    terminal; a line of its own is cut only where the terminal is narrower than it."""
    console = console or stdout()
    console.print(title, style="table.title", highlight=False, soft_wrap=True)
    console.print(table)


def leaf_table(leaves: list[dict[str, Any]]) -> Any:
    """The per-leaf statistics as a table (``vault stats`` of a vault or a dataset)."""
    from rich.table import Table

    table = Table()
    for col in ("leaf", "dtype", "count", "min", "max", "mean", "std", "NaN", "Inf"):
        table.add_column(col, justify="left" if col in ("leaf", "dtype") else "right")
    for s in leaves:
        table.add_row(
            s["name"],
            s["dtype"],
            str(s["count"]),
            number(s["min"]),
            number(s["max"]),
            number(s["mean"]),
            number(s["std"]),
            str(s["nan"]),
            str(s["inf"]),
        )
    return table


def episode_fields(source: Any) -> dict[str, Any]:
    """The episode keys of ``vault stats --json`` for a vault or a dataset (all None when it
    keeps no episode index)."""
    from vault import episode_stats

    keys = ("episodes", "open_episodes", "truncated_episodes", "episode_return", "episode_length")
    if not source.has_episodes:
        return dict.fromkeys(keys)
    counted = episode_stats(source.episodes(include_open=True))
    values = (counted[k] for k in ("complete", "open", "truncated", "return", "length"))
    return dict(zip(keys, values, strict=True))
