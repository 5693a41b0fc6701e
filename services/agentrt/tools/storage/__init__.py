"""The tool service's storage: its tables, their compare-and-set transitions, their migrations.

Owns the execution journal and the sandboxes' rows (`models`), every transaction on them
(`store.ToolStore`, SQLAlchemy 2 async) and the Alembic schema (`migrate.upgrade` over
`migrations/`, version table `alembic_version_tools`).
"""
