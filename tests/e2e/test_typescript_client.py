"""@agentrt/client (clients/typescript) against the real mesh, driven from pytest.

The mesh is started by `start_mesh` (as `agentrt up` does) with the provider emulator as the
model and a bearer token every service requires; then `npm test` compiles the package and its
tests (`npm run build`: tsc, offline, since `npm ci` ran in `make install`) and runs them with
`node --test`:
a run with a tool call streamed to completion, an approval answered from Node, a reconnect
mid-stream, refused requests surfacing their reasons (clients/typescript/test/mesh.test.ts).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import MESH_TOKEN

from tests.needs import unavailable

pytestmark = pytest.mark.slow

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
#: The tests of clients/typescript/test/mesh.test.ts; all of them must run and pass.
NODE_TESTS = 4


def test_the_typescript_client_drives_the_mesh(token_mesh, tmp_path):
    mesh, emu = token_mesh.mesh, token_mesh.emu
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        unavailable("node and npm are not installed (Node 20)")
    if not (PACKAGE / "node_modules" / "@connectrpc" / "connect-node").is_dir():
        unavailable("clients/typescript/node_modules is missing: run `make install` (npm ci)")
    scratch = tmp_path / "work"
    scratch.mkdir()
    env = {
        **os.environ,
        "AGENTRT_RUNS_ADDR": mesh.addresses["runs"],
        "AGENTRT_SESSIONS_ADDR": mesh.addresses["sessions"],
        "AGENTRT_AUTH_TOKEN": MESH_TOKEN,
        "AGENTRT_EMULATOR_URL": emu.base_url,
        "AGENTRT_TEST_DIR": str(scratch),
        "NO_COLOR": "1",
    }
    built = subprocess.run(
        [npm, "run", "--silent", "build"], cwd=PACKAGE, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout + built.stderr
    done = subprocess.run(
        ["node", "--test", "--test-reporter=tap", "--test-concurrency=1", "dist/test/"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # the node runner's own count: every test ran, none failed, none was skipped
    summary = re.findall(r"^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$", output, re.M)
    counts = {key: int(value) for key, value in summary}
    assert counts.get("tests") == NODE_TESTS and counts.get("pass") == NODE_TESTS, output
    assert counts.get("fail") == 0 and counts.get("skipped") == 0 and counts.get("cancelled") == 0, output
    # the model was asked exactly as often as the scripts said (nothing left, nothing extra)
    assert emu.pending == 0
