"""The documentation site builds with ``mkdocs build --strict`` and works in a browser.

The build fails on a broken link or anchor, a page missing from the nav, a nav entry without a
page, an API object mkdocstrings cannot find, or a docstring it cannot parse. The built site
is then served on loopback and opened in headless Chromium (Debian's ``chromium``, driven by
Playwright through ``executable_path``; ``.ci/run`` installs it): the home page, the API page
of ``vault`` and the format specification render with no console error, the browser's search
finds public names, and the search index holds every public class and function of ``vault``
and ``buffers``. Screenshots of the three pages go to ``$RLVAULT_DOCS_SCREENSHOTS`` when it is
set (to look at them), else into the test's temporary folder.
"""

from __future__ import annotations

import functools
import http.server
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _markdown_blocks import ROOT

import buffers
import vault

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = {"home": "", "api": "api/vault/", "format": "format/"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """``mkdocs build --strict`` of the repository's site into a temporary folder."""
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    ran = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return ran, site


def public_callables() -> list[str]:
    """Every class and function that ``vault`` and ``buffers`` list in ``__all__``."""
    names = []
    for module in (vault, buffers):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                names.append(name)
    return names


def test_the_site_builds_strictly(built: tuple[subprocess.CompletedProcess, Path]) -> None:
    ran, site = built
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "WARNING" not in ran.stderr, ran.stderr
    for page in [*PAGES.values(), "getting-started/", "concepts/", "changelog/", "cli/"]:
        assert (site / page / "index.html").is_file(), page
    changelog = (site / "changelog" / "index.html").read_text()
    assert "0.1.0" in changelog  # CHANGELOG.md, included
    assert "--8&lt;--" not in changelog


def settled_hrefs(page: Any, timeout: float = 15.0) -> list[str]:
    """The search results' links once the list stops changing (it is re-rendered as each typed
    letter's results arrive): read whole, in one evaluation, until two reads agree."""
    links = page.locator("a.md-search-result__link")
    read = 'els => els.map(e => e.getAttribute("href"))'
    last, deadline = links.evaluate_all(read), time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.wait_for_timeout(300)
        now = links.evaluate_all(read)
        if now == last:
            return list(now)
        last = now
    return list(last)


def test_the_search_index_holds_every_public_name(
    built: tuple[subprocess.CompletedProcess, Path],
) -> None:
    ran, site = built
    assert ran.returncode == 0, ran.stderr
    docs = json.loads((site / "search" / "search_index.json").read_text())["docs"]
    places = [f"{d['title']} {d['location']}" for d in docs]
    missing = [
        name
        for name in public_callables()
        if not any(re.search(rf"(^|#|\.){re.escape(name)}\b", p) for p in places)
    ]
    assert not missing, f"not in the search index (so not in the API reference): {missing}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(built: tuple[subprocess.CompletedProcess, Path]) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a free port), for the module's tests."""
    ran, site = built
    assert ran.returncode == 0, ran.stderr
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_site_renders_in_chromium_without_errors(served: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    shots = Path(os.environ.get("RLVAULT_DOCS_SCREENSHOTS", tmp_path / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user data dir
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = browser.new_page()
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            headings = {}
            for name, path in PAGES.items():
                page.goto(served + path, wait_until="networkidle")
                headings[name] = page.locator("article h1").first.inner_text()
                page.screenshot(path=str(shots / f"{name}.png"))
            # the API page shows the Vault class, its signature and its methods
            page.goto(served + PAGES["api"], wait_until="networkidle")
            assert page.locator("[id='vault.Vault']").count() == 1
            assert page.locator("[id='vault.Vault.create']").count() == 1
            # the browser's search (Material's worker over search_index.json) finds names
            page.goto(served, wait_until="networkidle")
            found = {}
            search = page.locator("input.md-search__input")
            for query in ("make_flat_buffer", "Dataset", "Vault"):
                search.click()
                search.fill("")
                search.press_sequentially(query)  # typed, as a reader types
                page.locator(".md-search-result__item").first.wait_for(timeout=15_000)
                found[query] = settled_hrefs(page)
        finally:
            browser.close()
    assert not problems, problems
    assert headings["home"].startswith("rlvault"), headings
    assert headings["format"], headings
    assert "vault" in headings["api"].lower(), headings
    for query, module in (
        ("make_flat_buffer", "buffers"),
        ("Dataset", "vault"),
        ("Vault", "vault"),
    ):
        hrefs = found[query]  # the API reference's entry is among the results
        assert any(h and h.endswith(f"#{module}.{query}") for h in hrefs), (query, hrefs)
    for name in PAGES:
        assert (shots / f"{name}.png").stat().st_size > 10_000  # a page was drawn
