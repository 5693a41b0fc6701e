"""The committed generated code equals what protos/generate.py produces from protos/ now."""

from __future__ import annotations

import filecmp
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "services" / "agentrt" / "v1"


def _generator():
    spec = importlib.util.spec_from_file_location("agentrt_protos_generate", ROOT / "protos" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    written = _generator().generate(tmp_path)
    fresh = tmp_path / "agentrt" / "v1"
    names = {p.name for p in written}
    committed = {p.name for p in COMMITTED.iterdir() if p.is_file()}
    assert names == committed, f"missing {sorted(names - committed)}, extra {sorted(committed - names)}"
    stale = [n for n in sorted(names) if not filecmp.cmp(fresh / n, COMMITTED / n, shallow=False)]
    assert not stale, f"stale generated code (run `make protos`): {stale}"
