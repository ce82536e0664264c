"""The README runs as printed: a new user's walk through it, every line in order.

The walk is ``tests/_markdown_blocks.py``'s, the one that runs every docs page: one test (so
that pytest-xdist never runs the main job twice in one session: ``SharedRuns``), in a fresh
folder in which ``examples`` links to the repository's (the README's lines run from the
repository's root), from top to bottom. The install line is the set-up, which this test's own
environment already is (CI runs it); ``source .venv/bin/activate`` is done as activating does
it; the test command (between the ``ci-test-command`` markers) is CI's. Every other line runs
as printed, the main job in its default mode; ``console`` output is checked as printed, and
the main job's closing lines within the spreads the README states.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from pathlib import Path

import pytest
from _markdown_blocks import (
    ACTIVATE,
    MAIN_JOB,
    ROOT,
    SET_UP,
    SharedRuns,
    check,
    check_main_job_output,
    page_folder,
    page_steps,
    release,
    run_page,
)

from vault import Vault, VaultExistsError

README = (ROOT / "README.md").read_text()
CI_BLOCK = re.compile(r"<!-- ci-test-command -->\n```bash\n(.*?)\n```", re.S)


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SharedRuns:
    """The main job, once per session for every xdist worker (their common base folder)."""
    base = tmp_path_factory.getbasetemp()
    return SharedRuns((base if worker_id == "master" else base.parent) / "docs-shared-runs")


def test_the_readme_runs_as_printed(shared_runs: SharedRuns) -> None:
    with page_folder() as folder:
        walk(folder, shared_runs)


def walk(folder: Path, shared_runs: SharedRuns) -> None:
    steps, namespace = run_page(
        README, folder, name="README.md", activated=False, shared=shared_runs
    )
    check(steps, README)  # every step ran and exited 0; console output as printed
    ran = [s.text for s in steps]
    vault_lines = [s for s in steps if s.kind == "console"]
    assert len(vault_lines) >= 6
    assert all(s.text.startswith("vault ") for s in vault_lines)
    assert ran.index(ACTIVATE) < ran.index(MAIN_JOB) < ran.index(vault_lines[0].text)
    assert sum(s.expected is not None for s in vault_lines) >= 3  # real output, checked

    # The main job's closing lines are the README's (returns within what the README states).
    job = next(s for s in steps if s.text == MAIN_JOB)
    shown = re.search(r"```text\n(mean return over.*?)```", README, re.S)
    assert shown is not None
    check_main_job_output(shown.group(1), job.stdout)
    assert "runs/gridworld" in job.output

    # The quickstart prints what its comments say, and persists the buffer.
    quick = [s for s in steps if s.kind == "python"][:2]
    assert "[ True  True  True  True] 16" in quick[0].output
    offline = namespace["offline"]
    assert offline.experience["reward"].shape == (1, 1000)
    assert offline.current_index == 16
    assert offline.experience["reward"][0, :16].tolist() == list(range(16))
    release(namespace)

    # The tour made what it says, from the job's vault.
    runs = folder / "runs"
    made = {p.name for p in runs.iterdir()}
    assert {"gridworld", "quickstart", "best", "gridworld-plot.png", "gridworld.npz"} <= made
    best = Vault.open(str(runs / "best"))
    assert (best.rows, len(best.episodes())) == (1, 500)
    assert Vault.open(str(runs / "gridworld")).tags() == {
        "baseline": Vault.open(str(runs / "gridworld")).commit_id
    }
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
    steps = page_steps(README)
    bash = [s.text for s in steps if s.kind == "bash"]
    assert bash == [
        'python3.11 -m venv .venv && .venv/bin/pip install -e ".[plot]"',
        ACTIVATE,
        MAIN_JOB,
    ]
    assert SET_UP.match(bash[0])
    assert "pytest" not in " ".join(s.text for s in steps)  # CI's lines are CI's


def test_the_readme_is_a_front_door_into_the_docs() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == [
        "## Set up and run",
        "## Quickstart",
        "## The `vault` command",
        "## rlvault, Flashbax, Minari and TorchRL",
        "## Benchmarks",
        "## Documentation",
    ]
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 15
    missing = sorted({link for link in links if not (ROOT / link).is_file()})
    assert not missing, f"the README links to pages that do not exist: {missing}"
    for page in ("getting-started.md", "concepts.md", "cli.md", "format.md", "benchmarks.md"):
        assert f"docs/{page}" in links, page


def test_ci_runs_the_readme_test_command() -> None:
    block = CI_BLOCK.search(README)
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
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'eval "$test_cmd"' in ci
    # Getting started shows the same command
    started = CI_BLOCK.search((ROOT / "docs" / "getting-started.md").read_text())
    assert started is not None
    assert started.group(1).strip() == extracted
