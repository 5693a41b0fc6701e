"""Alembic environment of the gateway (see agentrt.mesh.storage.migrate.run_env).

The version table is the service's own (`alembic_version_gateway`); the schema is the
limiter's tables and the model-call journal's.
"""

import sqlalchemy as sa

from agentrt.gateway.journal.sql import metadata as journal_metadata
from agentrt.gateway.limiter.postgres import metadata as limiter_metadata
from agentrt.mesh.storage.migrate import run_env

metadata = sa.MetaData()
for table in (*limiter_metadata.tables.values(), *journal_metadata.tables.values()):
    table.to_metadata(metadata)

run_env(metadata, "alembic_version_gateway")
