"""Generated from protos/agentrt/v1 by protos/generate.py; never edit."""
