"""Skips that must not hide in CI.

On a developer's machine a test whose dependency is missing (PostgreSQL, buf) skips with a
reason; under CI (`CI` set, as `.ci/run` runs) the same test FAILS, so a green CI run never
means "the PostgreSQL half did not run".
"""

from __future__ import annotations

import os

import pytest


def unavailable(reason: str) -> None:
    """Skip the calling test with reason, or fail it when running under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run this test)")
    pytest.skip(reason)
