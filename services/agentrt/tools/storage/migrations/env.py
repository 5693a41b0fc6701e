"""Alembic environment of the tool service (see agentrt.mesh.storage.migrate.run_env).

The version table is the service's own (`alembic_version_tools`).
"""

from agentrt.mesh.storage.migrate import run_env
from agentrt.tools.storage.models import Base

run_env(Base.metadata, "alembic_version_tools")
