"""`python -m agentrt.runs`: the same as `agentrt serve runs`."""

from agentrt.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", "runs"]))
