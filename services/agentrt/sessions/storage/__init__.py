"""The session store's storage (004 §2.5–§2.5h): tables, statements and the store over them.

`store` is the domain over SQL (what the servicer calls), `reads` its reads; `models` the
tables, `migrate` + `migrations/` their schema; `queries` the statements, `rows` rows to
domain values; `appends` a turn's batch made ready for one database step, run by
`sql_sqlite` or `sql_postgres` (decision 0025). No gRPC here.
"""
