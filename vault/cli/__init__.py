"""The ``vault`` command line (``vault --help``); see :mod:`vault.cli.app`.

A client of the public API only (``import vault``): it parses, calls and renders. Heavy
imports (jax, matplotlib, numpy) load inside commands.
"""

from __future__ import annotations

from vault.cli.app import app, main

__all__ = ["app", "main"]
