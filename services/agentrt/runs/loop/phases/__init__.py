"""The phases of a turn and the turn contract's concerns (004 §2.1–§2.3a, §2.4, §2.6–§2.8).

The model half (`model`: the request, the call, the turn's keys), the tool phase (`tools`:
partition; `batch`: execution through the tool service; `results`: what a call that did not run to
its own result is answered; `sandbox`: the run's sandbox in it;
`child`: agents as tools), and a module per concern of the turn contract: `handoff`,
`structured` (structured output), `stopping` (stopping early, error handlers),
`disclosure` (deferred tools), `guardrails/` (the stages: `steps`, `checks`, `log`). The executor
(runs/loop/executor.py) composes them through runs/loop/turns.py.
"""
