"""Alembic revisions of the tool service, oldest first by `down_revision`."""
