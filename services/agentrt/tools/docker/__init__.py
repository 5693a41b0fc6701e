"""The docker sandbox backend (004 §2.7n, §2.7o, §2.7p, §2.7q).

Owns the engine connection and the sandbox containers (`engine`: one persistent container
per docker sandbox, adopted by fingerprint or replaced, never touching a container it did
not create) and running commands in them (`backend`: `docker exec` of the keeper, with
the contract of `tools.sandbox.local.LocalSandbox.run`).
"""
