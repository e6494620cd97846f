"""The snippet run inside a simulated constrained host (tests/support/constrained.py).

``python probe_snippet.py BACKEND NETWORK WORKDIR MARKER [nested-flags]`` asks
``status`` about the policy, then launches a command that would create MARKER,
and prints one JSON object:

    {"status": {...}, "launch": {"ran": bool, "returncode": int | None,
     "error": "ClassName" | None, "reason": "code" | None, "errno": int | None},
     "warnings": ["..."], "backend_used": "native" | "bwrap" | None}

It never raises: every exception is reported (``"unexpected": "Traceback..."``), so
the test sees what went wrong instead of a half-printed result.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import traceback


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _jsonable(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "value") and isinstance(getattr(obj, "value"), str):
        return obj.value
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def main(argv):
    backend, network, workdir, marker = argv[:4]
    allow_nested = "allow-nested" in argv[4:]
    out = {"status": None, "launch": None, "warnings": [], "backend_used": None}
    collect = _Collect()
    logging.getLogger("pysandbox").addHandler(collect)
    try:
        import pysandbox
        policy = pysandbox.Policy.default(workdir=workdir, network=network,
                                          allow_nested_userns=allow_nested)
        try:
            out["status"] = _jsonable(pysandbox.status(policy, backend=backend))
        except Exception:  # reported, not raised: the test judges it
            out["status_exception"] = traceback.format_exc()
        launch = {"ran": False, "returncode": None, "error": None, "reason": None, "errno": None}
        try:
            with pysandbox.Popen(["/bin/sh", "-c", 'echo ran > "$1"', "sh", marker],
                                 policy=policy, backend=backend) as proc:
                out["backend_used"] = proc.backend_name
                launch["returncode"] = proc.wait(timeout=60)
        except pysandbox.SandboxError as exc:
            launch["error"] = type(exc).__name__
            launch["reason"] = exc.reason.value
            launch["errno"] = getattr(exc, "errno", None)
            launch["message"] = str(exc)
        launch["ran"] = os.path.exists(marker)
        out["launch"] = launch
    except BaseException:
        out["unexpected"] = traceback.format_exc()
    out["warnings"] = collect.messages
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
