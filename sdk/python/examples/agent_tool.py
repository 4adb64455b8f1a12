#!/usr/bin/env python3
"""A tool a language model can call to run the Python code it wrote, in a sandbox instead of on your
machine.

``PythonTool`` keeps one sandbox for a conversation (so files persist between calls; should the
conversation never be closed, its lifetime pauses the sandbox after ten idle minutes, the next call
resumes it, and it is terminated after an hour), writes each
snippet to a file and runs it with a time limit and an output cap, and answers with a small JSON-able
dict the model can read: exit code, output, whether it timed out. The code never runs in this process,
and never through a shell on the host: only as argv inside the sandbox.

How isolated "in a sandbox" is depends on the daemon's provider (``client.runtime()``): ``oci`` runs each
sandbox as a container of its own (user, mount, PID and network namespaces, seccomp, cgroup limits);
``host`` runs plain host processes and isolates nothing. The tool refuses a provider whose runtime class
is ``host-process`` unless told otherwise.

    SANDBOXD_URL=... SANDBOXD_TOKEN=... python3 agent_tool.py [--allow-unisolated]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from sandboxd import Client, Lifetime, Sandbox, SandboxdError

TOOL_SCHEMA: Dict[str, Any] = {
    "name": "run_python",
    "description": "Run a Python 3 program in an isolated sandbox and return its exit code and output. "
    "Files written by one call are there in the next.",
    "parameters": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "the program's source"},
            "timeout_seconds": {"type": "number", "description": "time limit, at most 60", "default": 10},
        },
        "required": ["code"],
    },
}
"""The tool's declaration, in the shape function-calling APIs take."""


class PythonTool:
    def __init__(self, client: Optional[Client] = None, *, allow_unisolated: bool = False) -> None:
        self.client = client or Client()
        runtime_class = self.client.runtime().provider.runtime_class
        if runtime_class == "host-process" and not allow_unisolated:
            raise SystemExit(
                "the daemon's provider runs sandboxes as plain host processes: model-written code would "
                "run unisolated on this machine (run sandboxd with --provider oci, or pass allow_unisolated)"
            )
        self.sandbox: Optional[Sandbox] = None
        self.calls = 0

    def run_python(self, code: str, timeout_seconds: float = 10) -> Dict[str, Any]:
        """The tool: runs code, answers with what a model needs to read."""
        if self.sandbox is None:
            self.sandbox = Sandbox.create(
                self.client,
                required_capabilities=["commandExecution", "fileAccess"],
                lifetime=Lifetime(ttl_seconds=3600, idle_seconds=600),
            )
        self.calls += 1
        name = f"snippet_{self.calls}.py"
        try:
            self.sandbox.files.write(name, code)
            r = self.sandbox.run(
                ["python3", "-I", name],  # -I: no user site, no environment variables, no cwd on sys.path
                timeout=min(max(timeout_seconds, 0.1), 60),
                max_output_bytes=64 << 10,
                env={"PYTHONDONTWRITEBYTECODE": "1"},
            )
        except SandboxdError as e:
            return {"error": f"{e.code}: {e.message}"}
        return {
            "exit_code": r.exit_code,
            "stdout": r.stdout_text,
            "stderr": r.stderr_text[-4000:],
            "timed_out": r.timed_out,
            "output_truncated": r.truncated,
            "seconds": round(r.duration.total_seconds(), 3),
        }

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.terminate(wait=False)
            self.sandbox = None
        self.client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allow-unisolated", action="store_true", help="accept a host-process provider")
    args = ap.parse_args()
    tool = PythonTool(allow_unisolated=args.allow_unisolated)
    try:
        # What a model might send, one tool call after another.
        calls: List[Dict[str, Any]] = [
            {"code": "import math\nprint(math.factorial(20))"},
            {"code": "open('state.txt', 'w').write('kept')\nprint('wrote')"},
            {"code": "print(open('state.txt').read())"},
            {"code": "raise ValueError('the model got it wrong')"},
            {"code": "while True:\n    pass", "timeout_seconds": 1},
        ]
        for call in calls:
            print(json.dumps({"call": call, "result": tool.run_python(**call)}))
    finally:
        tool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
