"""The run loop: one run's executor and the phases of a turn (004 §2.1–§2.3a, §2.5, §2.7).

`executor` drives a run (`RunExecutor`); `core` holds its state and fenced writes;
`turns` the phases of a turn; `housekeeping` compaction and overflow recovery; `turn` the
model half; `tools_phase` + `batch` the tool phase; `persistence` the session writes;
`compaction`, `reconcile`, `context_cache` their concerns.
"""
