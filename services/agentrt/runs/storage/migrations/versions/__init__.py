"""Alembic revisions of the run loop, oldest first by `down_revision`."""
