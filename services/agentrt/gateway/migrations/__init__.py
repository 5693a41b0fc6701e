"""Alembic migrations of the gateway's tables: the shared limiter's (run by `agentrt.gateway.limiter_pg`)."""
