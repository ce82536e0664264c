"""The README's quickstart runs as printed, and CI runs the README's test command."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_quickstart_runs(capsys, tmp_path, monkeypatch) -> None:
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2  # the buffers quickstart, then persisting it
    assert len(blocks[0].strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README-quickstart-{i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "[ True  True  True  True] 16" in out
    offline = namespace["offline"]
    assert offline.experience["reward"].shape == (1, 1000)
    assert offline.current_index == 16
    assert offline.experience["reward"][0, :16].tolist() == list(range(16))


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
