"""Alembic migrations of the gateway's tables: the shared limiter's (run by `gateway.limiter.postgres`)."""
