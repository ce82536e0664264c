"""A release a user can install: ``python -m build`` makes an sdist and a wheel (built from the
sdist) holding every module of ``vault/`` and ``buffers/``, both ``py.typed`` and the license;
the wheel, installed (not editable) in a fresh virtual environment, runs ``vault --version``,
``vault --help``, ``import buffers, vault`` and the README's quickstart (a buffer filled, written
to a vault, read back and sampled), then ``vault info`` of what it wrote.

To stay fast and offline, the build uses this environment's setuptools (``--no-isolation``)
and the fresh environment reaches the dependencies already installed here through a ``.pth``
line naming this environment's site-packages, added after the wheel is installed with
``--no-deps`` (``.pth`` files are not read in a folder that a ``.pth`` line adds, so the
editable install of the repository stays invisible there: the test checks where ``vault`` and
``buffers`` are imported from).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vault", "buffers")
# what a checkout holds besides the sources (hidden folders, caches, outputs of earlier runs)
NOT_SOURCES = shutil.ignore_patterns(
    ".*", "__pycache__", "*.egg-info", "build", "dist", "site", "runs", "vaults", "bench-results"
)

# the README's quickstart: fill a buffer, persist it, read it back as a buffer state, sample
QUICKSTART = """
import jax, jax.numpy as jnp
import buffers as fbx
from vault import Vault

buffer = fbx.make_flat_buffer(max_length=64, min_length=4, sample_batch_size=2)
state = buffer.init({"obs": jnp.zeros(3), "reward": jnp.float32(0)})
for i in range(8):
    state = buffer.add(state, {"obs": jnp.full(3, i, jnp.float32), "reward": jnp.float32(i)})
with Vault.create("runs/quickstart", state) as v:
    print("wrote", v.write(state))
offline = Vault.open("runs/quickstart").read(capacity=64)
batch = buffer.sample(offline, jax.random.key(0))
print("read", int(fbx.timesteps_added(offline)), "valid", bool(batch.valid.all()))
"""


def _run(args: list[Any], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{args}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done.stdout


def _modules() -> set[str]:
    """Every module and data file of the packages, as wheel paths (``vault/cli/app.py``)."""
    return {
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".typed")
    }


def test_wheel_installs_in_a_fresh_environment_and_runs(tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    source, dist = tmp_path / "source", tmp_path / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source], tmp_path)
    (wheel,) = dist.glob("rlvault-*.whl")
    (sdist,) = dist.glob("rlvault-*.tar.gz")

    modules = _modules()
    assert {"vault/py.typed", "buffers/py.typed", "vault/cli/app.py"} <= modules
    inside = set(zipfile.ZipFile(wheel).namelist())
    assert sorted(modules - inside) == []  # every subpackage, module and py.typed
    assert f"rlvault-{version}.dist-info/licenses/LICENSE" in inside
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert sorted((modules | {"LICENSE", "README.md", "pyproject.toml"}) - in_sdist) == []

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    python, site = venv / "bin" / "python", _site_packages(venv)
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    _run([*pip, "install", "--no-deps", "--no-index", "--quiet", wheel], tmp_path)
    # the dependencies: this environment's site-packages, after the fresh one on sys.path
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env |= {"PYTHONNOUSERSITE": "1", "JAX_PLATFORMS": "cpu", "COLUMNS": "100"}
    work = tmp_path / "work"
    work.mkdir()
    show = "print(vault.__file__, buffers.__file__, vault.__version__, buffers.__version__)"
    where = _run([python, "-c", f"import buffers, vault; {show}"], work, env).split()
    assert where[:2] == [str(site / "vault" / "__init__.py"), str(site / "buffers" / "__init__.py")]
    assert where[2:] == [version, version]
    vault_command = venv / "bin" / "vault"
    assert _run([vault_command, "--version"], work, env) == f"rlvault {version}\n"
    assert "Inspect, verify, plot and reshape rlvault datasets." in _run(
        [vault_command, "--help"], work, env
    )

    out = _run([python, "-c", QUICKSTART], work, env).split()
    assert out == ["wrote", "8", "read", "8", "valid", "True"]
    info = _run([vault_command, "info", "runs/quickstart", "--json"], work, env)
    assert '"committed": 8' in info


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site
