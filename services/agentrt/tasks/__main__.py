"""`python -m agentrt.tasks`: the same as `agentrt serve tasks`."""

from agentrt.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", "tasks"]))
