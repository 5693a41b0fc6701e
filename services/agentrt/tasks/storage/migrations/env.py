"""Alembic environment of the task manager (see agentrt.mesh.storage.migrate.run_env).

The version table is the service's own (`alembic_version_tasks`).
"""

from agentrt.mesh.storage.migrate import run_env
from agentrt.tasks.storage.models import metadata

run_env(metadata, "alembic_version_tasks")
