"""The committed generated code (Python and TypeScript) equals what protos/generate.py produces now."""

from __future__ import annotations

import filecmp
import importlib.util
import pathlib

import pytest

from tests.needs import unavailable

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


TS_COMMITTED = ROOT / "clients" / "typescript" / "src" / "gen"


def test_generated_typescript_is_fresh(tmp_path):
    generator = _generator()
    if not (ROOT / "clients" / "typescript" / "node_modules" / ".bin" / "protoc-gen-es").exists():
        unavailable("protoc-gen-es is not installed: run `make install` (npm ci in clients/typescript)")
    try:
        generator._buf()
    except RuntimeError as exc:
        unavailable(str(exc))
    written = generator.generate_typescript(tmp_path)
    fresh = tmp_path / generator.TS_GEN
    names = {p.relative_to(fresh).as_posix() for p in written}
    committed = {p.relative_to(TS_COMMITTED).as_posix() for p in TS_COMMITTED.rglob("*") if p.is_file()}
    assert names == committed, f"missing {sorted(names - committed)}, extra {sorted(committed - names)}"
    stale = [n for n in sorted(names) if not filecmp.cmp(fresh / n, TS_COMMITTED / n, shallow=False)]
    assert not stale, f"stale generated TypeScript (run `make protos`): {stale}"
