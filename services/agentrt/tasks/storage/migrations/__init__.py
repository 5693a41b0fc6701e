"""Alembic migrations of the task manager's tables (run by `agentrt.tasks.storage.migrate`)."""
