"""Every page under ``docs/`` runs as printed: its code blocks, in page order, one namespace per
page, in a fresh folder (see ``tests/_markdown_blocks.py`` for what runs and what is checked).

The pages are found by a glob, so a page added later runs too. A page that shows the main
job's closing lines (Getting started) is checked as the README is: the hints as printed, the
returns within the spreads the page states.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _markdown_blocks import (
    MAIN_JOB,
    ROOT,
    S3_MARKER,
    SharedRuns,
    check,
    check_main_job_output,
    page_folder,
    page_steps,
    release,
    run_page,
    seconds,
)

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SharedRuns:
    """The main job, once per session for every xdist worker (their common base folder)."""
    base = tmp_path_factory.getbasetemp()
    return SharedRuns((base if worker_id == "master" else base.parent) / "docs-shared-runs")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_the_page_runs_as_printed(
    page: Path, request: pytest.FixtureRequest, shared_runs: SharedRuns
) -> None:
    text = page.read_text()
    aws = None
    if S3_MARKER in text:
        aws = request.getfixturevalue("s3_server").environment()
    with page_folder() as folder:
        steps, namespace = run_page(
            text,
            folder,
            name=str(page.relative_to(ROOT)),
            activated=True,
            shared=shared_runs,
            aws=aws,
        )
        release(namespace)
    check(steps, text)
    print(f"{page.relative_to(ROOT)}: {len(steps)} steps; slowest: {seconds(steps)}")
    shown = re.search(r"```text\n(mean return over.*?)```", text, re.S)
    if shown is not None:  # the main job's closing lines: checked against what it printed
        job = [s for s in steps if s.text == MAIN_JOB]
        assert job, "a page that shows how the main job ends runs it"
        check_main_job_output(shown.group(1), job[0].stdout)


def test_every_page_has_a_title_and_the_runnable_pages_are_found() -> None:
    assert len(PAGES) >= 20
    for page in PAGES:
        first = page.read_text().lstrip().splitlines()[0]
        included = first.startswith('--8<-- "')  # the title is the included file's
        assert first.startswith("# ") or included, f"{page}: a page starts with its title"
    runnable = [p for p in PAGES if page_steps(p.read_text())]
    assert {p.name for p in runnable} >= {"getting-started.md", "concepts.md", "pins.md"}
