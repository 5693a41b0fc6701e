"""Alembic revisions of the session store, oldest first by `down_revision`."""
