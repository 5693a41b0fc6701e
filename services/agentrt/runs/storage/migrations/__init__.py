"""Alembic migrations of the run loop's tables (run by `agentrt.runs.migrate`)."""
