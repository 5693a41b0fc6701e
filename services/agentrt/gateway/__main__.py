"""`python -m agentrt.gateway`: the same as `agentrt serve gateway`."""

from agentrt.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["serve", "gateway"]))
