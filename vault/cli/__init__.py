"""The ``vault`` command line (``vault --help``); see :mod:`vault.cli.app`."""

from __future__ import annotations

from vault.cli.app import app, main

__all__ = ["app", "main"]
