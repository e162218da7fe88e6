"""The test suite stands on its own: a copy of the repository with nothing beside it collects every test."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def repository_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_collection_from_a_clone_with_no_sibling_folders(tmp_path: Path) -> None:
    venv = ROOT / ".venv"
    stamp = venv / ".installed-test"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    assert stamp.is_file() and stamp.read_text() == digest, "run `python3 tasks.py test` to set up .venv first"
    clone = tmp_path / "alone" / "repo"  # alone/ holds nothing else: no ../shared beside the clone
    for name in repository_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    (clone / ".venv").symlink_to(venv)  # the set-up environment, so that tasks.py installs nothing
    if (ROOT / ".mypy_cache").is_dir():  # the type check of tasks.py test starts warm (it revalidates by content)
        shutil.copytree(ROOT / ".mypy_cache", clone / ".mypy_cache")
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_EVAL_DIR" and not k.startswith("PYTEST")}
    done = subprocess.run(
        [sys.executable, "tasks.py", "test", "--collect-only", "-q"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "error" not in output.lower().split("tests collected")[-1], output[-3000:]
    assert " tests collected" in output and "tests/bench/test_memory_quality.py" in output
    assert sorted(p.name for p in (tmp_path / "alone").iterdir()) == ["repo"]
