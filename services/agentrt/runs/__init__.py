"""The run loop service (RunService; seed 004 §2.1–§2.3, §2.11; seed 002 loop and phases).

See docs/services/runs.md.
"""
