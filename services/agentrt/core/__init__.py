"""The runtime's pure semantics: render, decide, truncate, error reasons, ids, limits.

Standard library only: no grpc, no SQL. Everything here is deterministic given its inputs.
"""
