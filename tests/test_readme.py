"""The README runs as printed: a new user's walk through it, every line in order.

One walk (a single test, so that pytest-xdist never runs the main job twice) in a fresh
folder in which ``examples`` links to the repository's (the README's lines run from the
repository's root), following the README from top to bottom:

* ```` ```bash ```` blocks: the install line (``python3.11 -m venv .venv && ... pip install``)
  is the set-up, which this test's own environment already is (CI runs it); ``source
  .venv/bin/activate`` is done as activating does it, by putting this interpreter's ``bin``
  folder first on ``PATH``; every other line runs in ``bash`` as printed (the main job in its
  default mode: the README shows its output). The test command (between the
  ``ci-test-command`` markers) and the "Development" section are CI's, not run here.
* ```` ```python ```` blocks run in one namespace, in order, like a notebook.
* every ``$ ...`` line of a ```` ```console ```` block runs in ``bash`` as printed.

Every step must exit 0 and print no traceback; then what the README says about the output is
checked against what the steps printed.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vault import Vault, VaultExistsError

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SET_UP = re.compile(r"^python3\.11 -m venv \.venv && \.venv/bin/pip install -e \"\.\[plot\]\"$")
ACTIVATE = "source .venv/bin/activate"


@dataclass
class Step:
    kind: str  # "bash", "python" or "console"
    text: str
    code: int = 0
    output: str = ""  # stdout and stderr
    stdout: str = ""
    seconds: float = 0.0
    namespace: dict = field(default_factory=dict)


def readme_steps(readme: str = README) -> list[Step]:
    """Every step of the walk, in the README's order (see the module docstring)."""
    ci = re.search(r"<!-- ci-test-command -->.*?<!-- /ci-test-command -->", readme, re.S)
    assert ci is not None
    body = readme.replace(ci.group(0), "").split("\n## Development", 1)[0]
    steps = []
    for lang, code in re.findall(r"```(\w+)\n(.*?)```", body, re.S):
        if lang == "python":
            steps.append(Step("python", code))
        elif lang == "bash":
            steps += [Step("bash", line) for line in code.splitlines() if line.strip()]
        elif lang == "console":
            steps += [Step("console", line[2:]) for line in code.splitlines() if line[:2] == "$ "]
    return steps


def walk(folder: Path) -> list[Step]:
    """Run every step in ``folder``; stop at the first that fails."""
    (folder / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["COLUMNS"] = "80"
    namespace: dict = {}
    done = []
    for step in readme_steps():
        t0 = time.perf_counter()
        if step.kind == "bash" and SET_UP.match(step.text):
            step.output = "(set-up: this environment)"
        elif step.text == ACTIVATE:
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
            env["VIRTUAL_ENV"] = str(Path(sys.executable).parents[1])
        elif step.kind == "python":
            out = io.StringIO()
            cwd = Path.cwd()
            try:
                os.chdir(folder)
                with contextlib.redirect_stdout(out):
                    exec(compile(step.text, f"README-{len(done)}", "exec"), namespace)
            finally:
                os.chdir(cwd)
            step.output, step.namespace = out.getvalue(), namespace
        else:
            ran = subprocess.run(
                ["bash", "-c", step.text],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            step.code, step.output = ran.returncode, ran.stdout + ran.stderr
            step.stdout = ran.stdout
        step.seconds = time.perf_counter() - t0
        done.append(step)
        if step.code != 0:
            break
    return done


def test_the_readme_runs_as_printed(tmp_path: Path) -> None:
    steps = walk(tmp_path)
    for step in steps:
        assert step.code == 0, f"{step.text!r} exited {step.code}:\n{step.output}"
        assert "Traceback" not in step.output, f"{step.text!r} printed:\n{step.output}"
    ran = [s.text for s in steps]
    assert len(steps) == len(readme_steps())  # every step ran
    vault_lines = [s for s in steps if s.kind == "console"]
    assert len(vault_lines) >= 12
    assert all(s.text.startswith("vault ") for s in vault_lines)
    assert ran.index(ACTIVATE) < ran.index("python examples/record_and_train.py")
    assert ran.index("python examples/record_and_train.py") < ran.index(vault_lines[0].text)

    # The main job's closing lines are the README's (returns within what the README states).
    job = next(s for s in steps if s.text == "python examples/record_and_train.py")
    shown = re.search(r"```text\n(mean return over.*?)```", README, re.S)
    assert shown is not None
    printed = job.stdout[job.stdout.index("mean return over") :].splitlines()
    expected = shown.group(1).splitlines()
    assert printed[-4:] == expected[-4:]  # the hints, as the README prints them
    for name in ("CQL (offline)", "behaviour cloning", "behaviour policy", "random policy"):
        figure = re.escape(name) + r" +([-+][0-9.]+)"
        want = float(re.search(figure, shown.group(1)).group(1))  # type: ignore[union-attr]
        got = float(re.search(figure, job.stdout).group(1))  # type: ignore[union-attr]
        spread = 0.1 if name == "CQL (offline)" else 0.05  # the README's stated spreads
        assert abs(got - want) <= spread, (name, got, want)
    assert "recorded 3000 steps x 64 environments" in job.output
    assert "runs/gridworld" in job.output

    # The quickstart prints what its comments say, and persists the buffer.
    quick = [s for s in steps if s.kind == "python"][:2]
    assert "[ True  True  True  True] 16" in quick[0].output
    offline = quick[1].namespace["offline"]
    assert offline.experience["reward"].shape == (1, 1000)
    assert offline.current_index == 16
    assert offline.experience["reward"][0, :16].tolist() == list(range(16))

    # The vault tour made what it says, from the job's vault.
    runs = tmp_path / "runs"
    made = {p.name for p in runs.iterdir()}
    assert {"gridworld", "quickstart", "demo", "demo-best", "first-rows", "later-rows"} <= made
    assert {"rows-again", "best", "gridworld-plot.png", "gridworld.npz"} <= made
    again, whole = Vault.open(str(runs / "rows-again")), Vault.open(str(runs / "gridworld"))
    assert (again.rows, again.committed_length) == (8, whole.committed_length)
    ls = next(s for s in vault_lines if s.text.startswith("vault ls"))
    assert max(len(line) for line in ls.output.splitlines()) <= 80


def test_the_quickstart_a_second_time_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2  # the buffers quickstart, then persisting it
    assert len(blocks[0].strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for code in blocks:
            exec(compile(code, "README-quickstart", "exec"), namespace)
        with pytest.raises(
            VaultExistsError,
            match=re.escape(
                f"a Zarr node already exists at {tmp_path / 'runs' / 'quickstart'}: to add to "
                "a vault there, open it with Vault.open(path, mode='a'); to start afresh, "
                "choose a new path or delete the old one first"
            ),
        ):
            exec(compile(blocks[1], "README-quickstart-again", "exec"), namespace)


def test_the_walk_skips_only_the_set_up_and_ci() -> None:
    steps = readme_steps()
    bash = [s.text for s in steps if s.kind == "bash"]
    assert bash == [
        'python3.11 -m venv .venv && .venv/bin/pip install -e ".[plot]"',
        ACTIVATE,
        "python examples/record_and_train.py",
    ]
    assert SET_UP.match(bash[0])
    assert "pytest" not in " ".join(s.text for s in steps)  # CI's lines are CI's


def test_ci_runs_the_readme_test_command() -> None:
    block = re.search(r"<!-- ci-test-command -->\n```bash\n(.*?)\n```", README, re.S)
    assert block is not None
    extracted = subprocess.run(
        [
            "bash",
            "-c",
            (
                "sed -n '/<!-- ci-test-command -->/,/<!-- \\/ci-test-command -->/p' README.md "
                "| grep -v '^<!--' | grep -v '^```' | sed '/^\\s*$/d'"
            ),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert extracted == block.group(1).strip()
    assert "pytest" in extracted
    assert extracted in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'eval "$test_cmd"' in ci
