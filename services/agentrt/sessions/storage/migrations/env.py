"""Alembic environment of the session store (see agentrt.mesh.storage.migrate.run_env).

The version table is the service's own (`alembic_version_sessions`).
"""

from agentrt.mesh.storage.migrate import run_env
from agentrt.sessions.storage.models import metadata

run_env(metadata, "alembic_version_sessions")
