"""Alembic migrations of the tool service's tables (run by `agentrt.tools.storage.migrate`)."""
