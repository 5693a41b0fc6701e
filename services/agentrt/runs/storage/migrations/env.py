"""Alembic environment of the run loop (see agentrt.mesh.storage.migrate.run_env).

The version table is the service's own (`alembic_version_runs`).
"""

from agentrt.mesh.storage.migrate import run_env
from agentrt.runs.storage.models import Base

run_env(Base.metadata, "alembic_version_runs")
