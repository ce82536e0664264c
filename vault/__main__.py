"""``python -m vault``: the ``vault`` command."""

from __future__ import annotations

from vault.cli import main

main()
