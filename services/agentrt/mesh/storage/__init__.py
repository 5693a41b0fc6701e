"""What every service's storage shares: the database engine factory and its failures.

`db` (`Database`: SQLite or PostgreSQL, its write/read/autocommit/driver paths and the inline
SQLite paths), `pg_pool` (a connection lost under a body that had not committed: once more on
another), `sqlite_file` (the embedded default's file), `transient` (the one classification of
a database failure worth retrying, and the retry), `migrate` (Alembic to the newest revision,
each service its own version table). Loggers keep their names (`agentrt.mesh.db`, `agentrt.mesh`).
"""
