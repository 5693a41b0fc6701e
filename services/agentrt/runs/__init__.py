"""The run loop service (RunService; seed 004 §2.1–§2.3, §2.11; seed 002 loop and phases).

The service's rooms (`config`, `server`, `servicer`, `manager`, `domain`, `observe`) and one
package per concern: `storage/`, `events/`, `peers/`, `lifecycle/`, `convert/`, `loop/`
(with `loop/phases/`) and `spec/`. See docs/services/runs.md "Layout".
"""
