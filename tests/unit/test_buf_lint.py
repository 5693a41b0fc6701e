"""`buf lint` (STANDARD + COMMENTS, buf.yaml) passes on protos/, and `buf breaking` finds no
breaking change against protos/landed.json, the contracts as last landed (decision 0003)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

from tests.needs import unavailable

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _buf() -> str | None:
    beside = pathlib.Path(sys.executable).parent / "buf"
    return str(beside) if beside.exists() else shutil.which("buf")


def test_buf_lint_passes():
    buf = _buf()
    if buf is None:
        unavailable("buf is not installed (pip install buf-bin)")
    result = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_finds_nothing_against_the_landed_contracts():
    buf = _buf()
    if buf is None:
        unavailable("buf is not installed (pip install buf-bin)")
    result = subprocess.run(
        [buf, "breaking", "--against", "protos/landed.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
