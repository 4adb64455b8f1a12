"""The package as users get it: the wheel built with Debian's python3-build, installed into a fresh
venv, and the README's 30-second example run by that venv's python against the daemon."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

from daemon import Daemon

SDK = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3"


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (SDK / "README.md").read_text(), re.S)
    return str(blocks[0])


def test_the_wheel_installs_into_a_venv_and_runs_the_readme_example(daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info next to the sources
    shutil.copytree(SDK, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".mypy_cache"))
    dist = tmp_path / "dist"
    subprocess.run(
        [PYTHON, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("sandboxd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sandboxd/py.typed" in names and "sandboxd/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/"))]

    venv = tmp_path / "venv"
    subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)], check=True)

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SANDBOXD_URL": daemon.url,
        "SANDBOXD_TOKEN": daemon.token,
    }
    where = subprocess.run(
        [py, "-c", "import sandboxd; print(sandboxd.__file__)"], env=env, cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert where.stdout.startswith(str(venv))
    run = subprocess.run([py, "-c", readme_example()], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "0 42\nhello\n"
