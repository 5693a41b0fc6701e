"""Alembic environment of the gateway (see agentrt.mesh.migrate.run_env).

The version table is the service's own (`alembic_version_gateway`).
"""

from agentrt.gateway.limiter.postgres import metadata
from agentrt.mesh.migrate import run_env

run_env(metadata, "alembic_version_gateway")
