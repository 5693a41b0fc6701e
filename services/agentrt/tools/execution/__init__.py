"""Running one tool call, exactly once, through the execution journal (004 §2.7, §2.7g, §2.7m).

Owns the executor (`executor.ToolExecutor`: the journal protocol, calls outliving their
caller, cancellation and shutdown), the spans and metrics of each call and sandbox command
(`observe.ToolObserver`) and the task tools' client of TaskService (`tasks.TaskTools`,
004 §2.13). The tools it runs live beside it: the file tools in `tools.files`, commands in
`tools.sandbox`, `tools.docker` and `tools.shell`.
"""
