"""Alembic migrations of the session store's tables (run by `agentrt.sessions.storage.migrate`)."""
