"""Run the code blocks of a Markdown page as a reader would, and check the output it shows.

One mechanism for the README and every page under ``docs/`` (``tests/test_readme.py`` and
``tests/docs/test_pages.py`` use it). A page runs in a fresh folder of its own in which
``examples`` links to the repository's, its blocks in page order, with one Python namespace
per page; the first step that fails stops the page. The folder has a short path
(:func:`page_folder`), so that absolute paths in the output fit 80 columns. By the fence of a block:

* ```` ```python ```` runs in the page's namespace (``exec``), like a notebook cell.
* ```` ```pycon ```` runs its ``>>>`` lines in the same namespace and checks what they print
  against the lines shown after them (``doctest``, with ``...`` matching any text).
* ```` ```bash ```` runs every line in ``bash`` as printed (a line ending in ``\\`` goes on to
  the next). Two lines are the reader's set-up rather than a step: the install line
  (``python3.11 -m venv .venv && .venv/bin/pip install -e ...``), which the environment running
  the tests already is, and ``source .venv/bin/activate``, done as activating does it (this
  interpreter's ``bin`` folder first on ``PATH``).
* ```` ```console ````: every ``$ `` line runs in ``bash``; the lines after it, up to the next
  ``$ `` line, are what it printed (stdout and stderr, each line's trailing spaces ignored),
  checked exactly; a line ``...`` (or ``...`` inside a line) stands for any text. A ``$`` line
  with no lines after it shows no output, and none is checked.
* any other fence (``text``, ``json``, ``yaml``, ``toml``, ...) is not run.

Markers, each an HTML comment alone on its line (invisible on the rendered page):

* ``<!-- illustrative -->`` on the line before a block: the output it shows is illustrative,
  not checked (a ``console`` block's ``$`` lines still run).
* ``<!-- ci-test-command -->`` ... ``<!-- /ci-test-command -->``: the blocks between are CI's
  (the test command that ``.ci/run`` extracts from the README) and do not run here.
* ``<!-- docs-test: s3 -->`` anywhere on a page: the page runs against the test S3 server
  (``vault.testing.S3TestServer``, bucket ``rlvault``), its ``AWS_*`` environment exported to
  the page's Python code and commands, as a reader's shell would have it after
  ``export AWS_ENDPOINT_URL=...``.

Every step must exit 0 and print no traceback. Warnings are shown as a reader would see them
(not raised, as the test suite's ``filterwarnings = error`` would). The main job
(``python examples/record_and_train.py``) takes a minute and a half: it runs once per test
session (:class:`SharedRuns`, shared by the pytest-xdist workers through a file lock), and
each page that runs it gets the job's real output and a copy of the ``runs/`` it wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import doctest
import fcntl
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SET_UP = re.compile(r"^python3\.11 -m venv \.venv && \.venv/bin/pip install -e \"\.\[[\w,]+\]\"$")
ACTIVATE = "source .venv/bin/activate"
ILLUSTRATIVE = "<!-- illustrative -->"
CI_OPEN, CI_CLOSE = "<!-- ci-test-command -->", "<!-- /ci-test-command -->"
S3_MARKER = "<!-- docs-test: s3 -->"
MAIN_JOB = "python examples/record_and_train.py"
SHARED_COMMANDS = frozenset({MAIN_JOB})  # run once per session, see SharedRuns
RUN_LANGS = frozenset({"python", "pycon", "bash", "console"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)[^`]*$")


@dataclasses.dataclass
class Block:
    """One fenced block of a page."""

    lang: str
    code: str  # the block's lines, the fence's indentation removed
    line: int  # 1-based line of the opening fence
    illustrative: bool = False
    ci: bool = False  # between the ci-test-command markers


@dataclasses.dataclass
class Step:
    """One thing a reader does: a Python block, a ``>>>`` example, or a command."""

    kind: str  # "python", "pycon", "bash" or "console"
    text: str
    block: Block
    expected: str | None = None  # output the page shows for it (console); None: not shown
    code: int = 0
    output: str = ""  # what it printed (stdout and stderr)
    stdout: str = ""
    seconds: float = 0.0
    note: str = ""  # "set-up", "activate", "shared" (a SharedRuns result)

    @property
    def where(self) -> str:
        return f"line {self.block.line}"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` in order (fences may be indented, as in a list item)."""
    found: list[Block] = []
    lines = text.splitlines()
    ci = False
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped == CI_OPEN:
            ci = True
        elif stripped == CI_CLOSE:
            ci = False
        opening = _FENCE.match(line)
        if opening is None:
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        before = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        found.append(
            Block(
                lang=opening.group("lang").lower(),
                code="\n".join(body) + "\n",
                line=i + 1,
                illustrative=before == ILLUSTRATIVE,
                ci=ci,
            )
        )
        i = j + 1
    return found


def _command_lines(code: str) -> list[str]:
    """The commands of a bash block: non-blank lines, ``\\`` continuations joined."""
    commands: list[str] = []
    pending = ""
    for line in code.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command:
            commands.append(command)
    return commands


def _console_steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    shown: list[str] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            if steps:
                steps[-1].expected = _shown(shown, block)
            steps.append(Step("console", line[2:].strip(), block))
            shown = []
        elif steps:
            shown.append(line)
        elif line.strip():
            raise ValueError(f"line {block.line}: console output before any `$ ` line: {line!r}")
    if steps:
        steps[-1].expected = _shown(shown, block)
    return steps


def _shown(lines: list[str], block: Block) -> str | None:
    text = "\n".join(x.rstrip() for x in lines).strip("\n")
    return None if block.illustrative or not text else text


def page_steps(text: str) -> list[Step]:
    """Every step of a page, in page order (see the module docstring)."""
    steps: list[Step] = []
    for block in blocks(text):
        if block.ci or block.lang not in RUN_LANGS:
            continue
        if block.lang in ("python", "pycon"):
            steps.append(Step(block.lang, block.code, block))
        elif block.lang == "bash":
            steps += [Step("bash", line, block) for line in _command_lines(block.code)]
        else:
            steps += _console_steps(block)
    return steps


def normalise(output: str) -> str:
    """Output as compared: each line's trailing spaces and the trailing blank lines dropped."""
    return "\n".join(line.rstrip() for line in output.splitlines()).strip("\n")


def matches(expected: str, output: str) -> bool:
    """Whether ``output`` is what ``expected`` shows: ``...`` stands for any text, and a run of
    whitespace for any run of whitespace (a line the terminal wrapped elsewhere still matches,
    as with doctest's NORMALIZE_WHITESPACE); every other character is compared exactly."""
    pattern = ".*?".join(_literal(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, normalise(output).strip(), re.S) is not None


def _literal(text: str) -> str:
    """A pattern of ``text``: whitespace runs as ``\\s+``, everything else literally."""
    tokens = re.split(r"(\s+)", text)
    return "".join(r"\s+" if token.isspace() else re.escape(token) for token in tokens if token)


def mismatch(step: Step) -> str:
    """A readable difference between what a step's page shows and what it printed."""
    diff = difflib.unified_diff(
        (step.expected or "").splitlines(),
        normalise(step.output).splitlines(),
        "shown on the page",
        "printed",
        lineterm="",
    )
    return f"{step.where}: `$ {step.text}` printed something else:\n" + "\n".join(diff)


class SharedRuns:
    """Commands too slow to run once per page (the main job): run once per test session.

    ``folder`` is shared by every pytest-xdist worker of the session; the first page to need a
    command runs it under a file lock in a folder of its own (with ``examples`` linked, in the
    page's environment) and keeps what it printed; every page that runs it (this one
    included) gets that output and a copy of each top-level entry of ``runs/`` that it made.
    A page that already holds one of those entries runs the command itself instead.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def run(self, command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
        activated = env.get("VIRTUAL_ENV", "")
        key = re.sub(r"\W+", "-", f"{command} {bool(activated)}").strip("-")
        home = self.folder / key
        home.mkdir(parents=True, exist_ok=True)
        with open(home / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                result_file = home / "result.json"
                if not result_file.exists():
                    work = home / "work"
                    work.mkdir()
                    (work / "examples").symlink_to(ROOT / "examples")
                    ran = _bash(command, work, env)
                    result = {"code": ran.returncode, "stdout": ran.stdout, "stderr": ran.stderr}
                    result_file.write_text(json.dumps(result))
                result = json.loads(result_file.read_text())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        made = home / "work" / "runs"
        entries = sorted(made.iterdir()) if made.is_dir() else []
        if any((cwd / "runs" / entry.name).exists() for entry in entries):
            return _bash(command, cwd, env)
        for entry in entries:
            (cwd / "runs").mkdir(exist_ok=True)
            if entry.is_dir():
                shutil.copytree(entry, cwd / "runs" / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, cwd / "runs" / entry.name)
        return subprocess.CompletedProcess(
            command, result["code"], result["stdout"], result["stderr"]
        )


def _bash(
    command: str, cwd: Path, env: dict[str, str], *, merged: bool = False
) -> subprocess.CompletedProcess:
    """Run ``command`` in bash; ``merged``: stderr into stdout, in the order a terminal shows
    them (``stderr`` is then empty)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        timeout=900,
        check=False,
    )


@contextlib.contextmanager
def page_folder() -> Iterator[Path]:
    """A fresh, empty folder with a short path (``/tmp/rlvault-docs-XXXXXXXX``): commands print
    absolute paths, and a long one (pytest's temporary folders) would wrap at 80 columns where
    the page's shown output does not."""
    folder = Path(tempfile.mkdtemp(prefix="rlvault-docs-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def base_environment(activated: bool) -> dict[str, str]:
    """The environment of a page's commands: 80 columns; ``activated``: this venv's ``bin``
    folder first on ``PATH`` (as after ``source .venv/bin/activate``)."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["COLUMNS"] = "80"
    if activated:
        _activate(env)
    return env


def _activate(env: dict[str, str]) -> None:
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parents[1])


@contextlib.contextmanager
def _environment(aws: dict[str, str]) -> Iterator[None]:
    """For the whole page: this process's environment as the page's code sees it (``AWS_*``
    from ``aws`` only), restored afterwards with whatever the page's code set in it."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[key]
    os.environ.update(aws)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """The page's folder as the working directory of code run in this process."""
    cwd = Path.cwd()
    try:
        os.chdir(folder)
        yield
    finally:
        os.chdir(cwd)


def _run_pycon(step: Step, namespace: dict[str, Any], name: str) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(step.text, namespace, name, name, step.block.line)
    test.globs = namespace  # DocTest copies its globals; the page's namespace is shared
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    if runner.failures:
        step.code = 1
        step.output = report.getvalue()


def run_page(
    text: str,
    folder: Path,
    *,
    name: str,
    activated: bool,
    shared: SharedRuns | None = None,
    aws: dict[str, str] | None = None,
) -> tuple[list[Step], dict[str, Any]]:
    """Run every step of a page in ``folder`` (``examples`` is linked there); stop at the first
    step that fails. Returns the steps that ran and the page's namespace.

    ``activated``: the page's commands find this environment's ``python`` and ``vault`` from
    the start (a docs page, which assumes the environment of "Getting started"); otherwise
    only after the page's ``source .venv/bin/activate`` (the README). ``aws``: the ``AWS_*``
    variables of the test S3 server, for a page with the s3 marker.
    """
    (folder / "examples").symlink_to(ROOT / "examples")
    env = base_environment(activated)
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    env.update(aws or {})
    namespace: dict[str, Any] = {"__name__": "__main__"}
    with _environment(aws or {}), warnings.catch_warnings():
        warnings.simplefilter("default")  # shown as a reader sees them, not raised
        done = _run_steps(text, folder, name, env, namespace, shared)
    return done, namespace


def _run_steps(
    text: str,
    folder: Path,
    name: str,
    env: dict[str, str],
    namespace: dict[str, Any],
    shared: SharedRuns | None,
) -> list[Step]:
    done: list[Step] = []
    for step in page_steps(text):
        t0 = time.perf_counter()
        if step.kind == "bash" and SET_UP.match(step.text):
            step.note = "set-up"
        elif step.text == ACTIVATE:
            step.note = "activate"
            _activate(env)
        elif step.kind in ("python", "pycon"):
            out = io.StringIO()
            with _inside(folder), contextlib.redirect_stdout(out):
                if step.kind == "python":
                    code = compile(step.text, f"{name}:{step.block.line}", "exec")
                    exec(code, namespace)
                else:
                    _run_pycon(step, namespace, f"{name}:{step.block.line}")
            if step.kind == "python":
                step.output = out.getvalue()
        else:
            if shared is not None and step.text in SHARED_COMMANDS:
                ran = shared.run(step.text, folder, env)
                step.note = "shared"
            else:
                ran = _bash(step.text, folder, env, merged=step.kind == "console")
            step.code, step.stdout = ran.returncode, ran.stdout
            step.output = ran.stdout + (ran.stderr or "")
        step.seconds = time.perf_counter() - t0
        done.append(step)
        if step.code != 0:
            break
    return done


def release(namespace: dict[str, Any]) -> None:
    """Drop what a page's code made, running finalisers now with warnings shown rather than
    raised (e.g. a library's temporary folder cleaned up implicitly), as at the end of a
    reader's script."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        namespace.clear()
        gc.collect()


def check(steps: list[Step], text: str) -> None:
    """Every step of the page ran, exited 0, printed no traceback and, where the page shows
    its output, printed exactly that."""
    for step in steps:
        what = step.text if step.kind in ("bash", "console") else f"{step.kind} block"
        assert step.code == 0, f"{step.where}: {what!r} failed ({step.code}):\n{step.output}"
        assert "Traceback" not in step.output, f"{step.where}: {what!r} printed:\n{step.output}"
        if step.kind == "console" and step.expected is not None:
            assert matches(step.expected, step.output), mismatch(step)
    assert len(steps) == len(page_steps(text)), "not every step ran"


def seconds(steps: list[Step]) -> str:
    """Where a page's time went: its slowest steps."""
    slow = sorted(steps, key=lambda s: -s.seconds)[:3]
    return ", ".join(f"{s.where} {s.seconds:.1f}s" for s in slow)


# The main job's closing lines, as the README and "Getting started" show them: the evaluation
# returns move in their last digits between CPUs and jax versions (training amplifies float
# rounding), within the spreads these pages state; the hints are printed exactly.
RETURN_SPREADS = {
    "random policy": 0.05,
    "behaviour policy": 0.05,
    "behaviour cloning": 0.05,
    "CQL (offline)": 0.1,
}


def check_main_job_output(shown: str, stdout: str) -> None:
    """What the main job printed ends as ``shown`` (a page's text block) says it does."""
    assert "mean return over" in stdout, stdout
    printed = stdout[stdout.index("mean return over") :].splitlines()
    expected = shown.strip("\n").splitlines()
    assert printed[-4:] == expected[-4:], (printed, expected)  # the hints, as printed
    assert len(printed) == len(expected), (printed, expected)
    for name, spread in RETURN_SPREADS.items():
        figure = re.escape(name) + r" +([-+][0-9.]+)"
        want = re.search(figure, shown)
        got = re.search(figure, stdout)
        assert want is not None, f"the page shows no {name!r} return"
        assert got is not None, f"the job printed no {name!r} return"
        assert abs(float(got.group(1)) - float(want.group(1))) <= spread, (name, got, want)
    assert "recorded 3000 steps x 64 environments" in stdout
