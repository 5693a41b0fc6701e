"""The run loop's storage: its tables, the save point and leases, their migrations.

Owns the tables (`models`: agents, runs, run log, run events), every transaction on them
(`store.RunStore`, SQLAlchemy 2 async; the leases in `leases`, the hot transactions as the
drivers' statements in `lite` (SQLite) and `pg` (PostgreSQL), the prebuilt statements and
event rows of the rest in `sql`, the save point through transient failures in
`save_retry`), the column encoding of a run row (`records`) and the Alembic schema
(`migrate.upgrade` over `migrations/`, version table `alembic_version_runs`).
"""
