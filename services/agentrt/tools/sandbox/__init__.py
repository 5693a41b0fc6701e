"""Where exec_command's commands run: sandboxes, their workspaces and the local backend.

Owns the sandbox lifecycle (`manager.SandboxManager`: create / adopt / replace, stop,
destroy, and where a call without a sandbox runs, 004 §2.7n, §2.7p, §2.7q), which
directories may be a workspace (`workspaces.WorkspaceRules`), the shapes every backend
shares (`spec`: `CommandRequest`, `CommandResult`, `CallerDeadline`, `ExecContext`), the
local bubblewrap backend (`local.LocalSandbox`, 004 §2.7m) and how it launches a confined
command (`launch`: prlimit + bwrap argv and fds). The docker backend is `tools.docker`;
persistent shells over either are `tools.shell`.
"""
