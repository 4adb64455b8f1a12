"""The examples, run as scripts against the daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from daemon import Daemon

SDK = Path(__file__).resolve().parents[1]


def run(daemon: Daemon, *args: str) -> str:
    env = dict(os.environ, SANDBOXD_URL=daemon.url, SANDBOXD_TOKEN=daemon.token, PYTHONPATH=str(SDK / "src"))
    p = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_agent_tool(daemon: Daemon) -> None:
    out = run(daemon, str(SDK / "examples" / "agent_tool.py"), "--allow-unisolated")
    results: List[Dict[str, Any]] = [json.loads(line)["result"] for line in out.splitlines()]
    assert results[0]["exit_code"] == 0 and results[0]["stdout"] == "2432902008176640000\n"
    assert results[2]["stdout"] == "kept\n"  # a file from the call before
    assert results[3]["exit_code"] == 1 and "ValueError: the model got it wrong" in results[3]["stderr"]
    assert results[4]["timed_out"] is True and results[4]["exit_code"] is None


def test_copy_project(daemon: Daemon) -> None:
    out = run(daemon, str(SDK / "examples" / "copy_project.py"))
    assert "copied 2 files in" in out and "built dist/project.tar.gz" in out
    assert "2 Python files: ./calc/__init__.py, ./test_calc.py" in out
