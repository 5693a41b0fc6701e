"""The run loop: one run's executor and the phases of a turn (004 §2.1–§2.3a, §2.5, §2.7).

`executor` drives a run (`RunExecutor`); `core` holds its state and fenced writes, `deps`
what every executor of the process shares (and the crash points); `turns` the phases of a
turn, which live in `phases/` (the model half, the tool phase, the turn contract's
concerns); `housekeeping` compaction and overflow recovery; `persistence` the session
writes; `failures` the one place a run's structured failures are made; `compaction`,
`reconcile`, `context_cache` their concerns.
"""
