"""Alembic revisions of the task manager, oldest first by `down_revision`."""
