"""Fixtures of the ``vault`` command's tests (helpers live in ``_cli_vaults``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _cli_vaults import Cli, build


@pytest.fixture
def cli() -> Cli:
    return Cli()


@pytest.fixture
def vault_dir(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """An episode vault and its data."""
    path = tmp_path / "v"
    return path, build(path)
