"""The `agentrt` command: serve, up, run."""
