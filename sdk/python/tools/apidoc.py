#!/usr/bin/env python3
"""Writes the API reference, one HTML page per public module, from the package's docstrings (pydoc).

    /usr/bin/python3 sdk/python/tools/apidoc.py [OUT_DIR]      # default: sdk/python/build/apidoc

The pages are generated, not kept in the repository; open OUT_DIR/sandboxd.html.
"""

from __future__ import annotations

import os
import pydoc
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MODULES = [
    "sandboxd",
    "sandboxd.client",
    "sandboxd.sandbox",
    "sandboxd.aio",
    "sandboxd.types",
    "sandboxd.errors",
    "sandboxd.extensions",
    "sandboxd.extensions.lifetime",
    "sandboxd.extensions.stats",
    "sandboxd.relay",
]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "build" / "apidoc").resolve()
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE / "src"))
    os.chdir(out)  # pydoc.writedoc writes into the current directory
    for name in MODULES:
        pydoc.writedoc(name)
    missing = [m for m in MODULES if not (out / f"{m}.html").is_file()]
    if missing:
        print(f"apidoc: no page for {missing}", file=sys.stderr)
        return 1
    print(f"apidoc: {len(MODULES)} pages in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
