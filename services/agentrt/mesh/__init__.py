"""What every service shares.

Server bootstrap, interceptors, errors to status, the database engine factory, peer channels
and the configuration base.

Nothing here knows a service's semantics.
"""
