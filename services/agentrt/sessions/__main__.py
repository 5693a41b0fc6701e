"""`python -m agentrt.sessions`: the same as `agentrt serve sessions`."""

from agentrt.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", "sessions"]))
