"""Alembic revisions of the gateway, oldest first by `down_revision`."""
