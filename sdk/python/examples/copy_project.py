#!/usr/bin/env python3
"""Copy a project into a sandbox, build and test it there, and copy the result out.

With no arguments it makes a small Python project of its own to do this with; give it a directory to
use yours (it runs ``build_command`` in it, by default the project's unit tests and a tarball of it).

    SANDBOXD_URL=... SANDBOXD_TOKEN=... python3 copy_project.py [PROJECT_DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

from sandboxd import Sandbox

BUILD = textwrap.dedent(
    """\
    set -e
    python3 -m unittest discover -s . -q 2>&1 | tail -n 3
    mkdir -p dist
    tar -czf dist/project.tar.gz --exclude=./dist .
    echo built dist/project.tar.gz
    """
)


def make_demo_project(root: Path) -> Path:
    p = root / "demo"
    (p / "calc").mkdir(parents=True)
    (p / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (p / "test_calc.py").write_text(
        "import unittest\nfrom calc import add\n\n"
        "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("project", nargs="?", help="the project directory (default: a demo project)")
    ap.add_argument("--out", default=None, help="where the result goes (default: a temporary directory)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(args.project) if args.project else make_demo_project(Path(tmp))
        out = Path(args.out) if args.out else Path(tmp) / "out"

        with Sandbox.create() as sandbox:
            copied = sandbox.files.upload(project, "project")
            print(f"copied {len(copied)} files in, {sum(e.size for e in copied)} bytes")

            result = sandbox.run(["sh", "-c", BUILD], cwd="project", timeout=120)
            print(result.stdout_text, end="")
            if not result.ok:
                print(result.stderr_text, end="", file=sys.stderr)
                return result.exit_code or 1

            got = sandbox.files.download("project/dist", out)
            for path in got:
                with tarfile.open(path) as tar:
                    names = sorted(n for n in tar.getnames() if n.endswith(".py"))
                print(f"{path.name}: {path.stat().st_size} bytes, {len(names)} Python files: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
