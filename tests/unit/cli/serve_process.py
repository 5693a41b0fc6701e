"""Run `agentrt serve ...` as a process to its end (the refusal tests of serve and serve all)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Bound on one `serve` subprocess, in seconds.
PROCESS_TIMEOUT_S = 120
#: A model file that does not exist: the gateway loads no local model at start.
NO_LOCAL_MODEL = "/nonexistent/agentrt-serve-test-no-local-model.gguf"


def serve_to_end(tmp_path: Path, env: dict[str, str], *argv: str) -> tuple[int, str]:
    """Run `python -m agentrt.cli.main serve *argv` in a session of its own; return (status, stderr).

    The environment is this one without AGENTRT_* and OTEL_* variables, plus a state dir under
    `tmp_path`, no local model, and `env`. Fails when anything of that session is still
    running once it exited.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "OTEL_"))}
    full_env = {
        **base,
        "AGENTRT_STATE_DIR": str(tmp_path / "state"),
        "AGENTRT_LOCAL_MODEL_PATH": NO_LOCAL_MODEL,
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrt.cli.main", "serve", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(ProcessLookupError):  # its session (the process group it led) is empty
        os.killpg(proc.pid, 0)
    return proc.returncode, err.decode(errors="replace")
