"""Alembic environment of the session store (see agentrt.mesh.migrate.run_env).

The version table is the service's own (`alembic_version_sessions`).
"""

from agentrt.mesh.migrate import run_env
from agentrt.sessions.models import metadata

run_env(metadata, "alembic_version_sessions")
