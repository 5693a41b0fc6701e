"""`python -m agentrt.tools`: the same as `agentrt serve tools`."""

from agentrt.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", "tools"]))
