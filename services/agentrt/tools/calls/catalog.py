"""The built-in tools as the model and the runtime see them (004 §2.7c capability fields).

A `ToolDef` is data: name, description, JSON Schema of the arguments, and the capability
fields the run loop reads directly (read_only, retry_safe, needs_approval, timeout,
sequential, deferred). Behaviour lives in `execution/executor.py` (the task tools' in
`execution/tasks.py`, a client of TaskService); nothing here runs anything.
exec_command advertises `session_id` only when persistent shells are enabled (§2.7k):
`builtin(shells=False)` offers the plain schema, since a tool must not offer a field it
would ignore (and strict mode would force the model to spell "no session" every call).
`EXEC_COMMAND` itself (what `BY_NAME` resolves and the executor compares against) is the
plain entry; the advertised variant differs only in its schema and description.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ToolDef:
    """One tool of the catalog.

    Attributes:
        name: unique, [a-zA-Z0-9_-]{1,64}.
        description: what the tool does, for the model.
        parameters: JSON Schema (draft 2020-12 subset) of the arguments object.
        read_only: changes nothing; an interrupted call may be re-requested.
        retry_safe: running it twice is harmless.
        needs_approval: every call waits for a person (agents may tighten this per tool).
        timeout_seconds: default per-call limit, seconds; 0 = the service default.
        sequential: forces the whole batch of a turn to run serially (§2.7d).
        deferred: withheld from the model until revealed (§2.7i).
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    read_only: bool = False
    retry_safe: bool = False
    needs_approval: bool = False
    timeout_seconds: float = 0.0
    sequential: bool = False
    deferred: bool = False


EXEC_COMMAND = ToolDef(
    name="exec_command",
    description=(
        "Run a shell command with bash -c in the workspace and return its output (stdout and stderr "
        "interleaved) and exit status. The sandbox has no network; only the workspace is writable; "
        "/tmp is private and discarded after the command. Long output keeps its beginning and end."
    ),
    parameters={
        "type": "object",
        "properties": {
            "cmd": {"type": "string", "description": "The shell command, run as: bash -c <cmd>."},
            "workdir": {"type": "string", "description": "Directory to run in, relative to the workspace."},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "Time limit in milliseconds."},
        },
        "required": ["cmd"],
        "additionalProperties": False,
    },
    timeout_seconds=0.0,
)

READ_FILE = ToolDef(
    name="read_file",
    description="Read a text file in the workspace. Large files keep their beginning and end.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "File path, relative to the workspace."}},
        "required": ["path"],
        "additionalProperties": False,
    },
    read_only=True,
    retry_safe=True,
    timeout_seconds=30.0,
)

WRITE_FILE = ToolDef(
    name="write_file",
    description=(
        "Write a text file in the workspace, replacing it when it exists; missing directories are created."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The whole new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    retry_safe=True,
    timeout_seconds=30.0,
)

LIST_FILES = ToolDef(
    name="list_files",
    description=(
        "List a directory of the workspace: one entry per line, directories end with '/', symlinks show "
        "their target."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory, relative to the workspace (default: its root).",
            },
            "recursive": {
                "type": "boolean",
                "description": "List subdirectories too (at most 1000 entries).",
            },
        },
        "additionalProperties": False,
    },
    read_only=True,
    retry_safe=True,
    timeout_seconds=30.0,
)

APPLY_PATCH = ToolDef(
    name="apply_patch",
    description=(
        "Apply a patch to files in the workspace. Format:\n*** Begin Patch\n*** Add File: path\n+line\n"
        "*** Update File: path\n[*** Move to: new/path]\n@@ optional anchor line\n context line\n"
        "-removed line\n"
        "+added line\n*** Delete File: path\n*** End Patch\nContext and removed lines must match whole lines "
        "of the file; a hunk that does not match fails without changing anything."
    ),
    parameters={
        "type": "object",
        "properties": {
            "patch": {"type": "string", "description": "The patch text, *** Begin Patch to *** End Patch."}
        },
        "required": ["patch"],
        "additionalProperties": False,
    },
    timeout_seconds=30.0,
)

_TASK_ID = {"type": "string", "description": "The task's id (tsk_...), as spawn_task returned it."}

#: The task tools (004 §2.13): the model's four verbs for background work, served by
#: TaskService (`tools/execution/tasks.py` calls it). Limits are the task service's: depth 1
#: (a task cannot spawn tasks), 6 live tasks per session, 3 attempts, 300-character summaries.
SPAWN_TASK = ToolDef(
    name="spawn_task",
    description=(
        "Start a background task: a sub-agent (this agent, unless another registered agent is named) "
        "works on `input` in a session of its own while you keep going. Returns the task's id at once. "
        "When it ends, its result arrives as a [task notification] message; task_status reads it "
        "sooner. At most 6 tasks run at once per conversation; a task cannot spawn tasks."
    ),
    parameters={
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "What the task should do, as complete instructions."},
            "label": {"type": "string", "description": "A short name for displays (at most 200 characters)."},
            "agent": {"type": "string", "description": "A registered agent to run instead of this one."},
        },
        "required": ["input"],
        "additionalProperties": False,
    },
    retry_safe=True,  # the call id is the spawn's idempotency key
    timeout_seconds=60.0,
)

TASK_STATUS = ToolDef(
    name="task_status",
    description=(
        "Look at a background task: its status (working, input_required, completed, failed, "
        "canceled), attempt and, once it ended, its full result. With wait_seconds (at most 120) it "
        "waits for a working task to end first."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task_id": _TASK_ID,
            "wait_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": 120,
                "description": "Wait up to this many seconds for the task to end (default 0).",
            },
        },
        "required": ["task_id"],
        "additionalProperties": False,
    },
    read_only=True,
    retry_safe=True,
    timeout_seconds=180.0,
)

TASK_RETRY = ToolDef(
    name="task_retry",
    description=(
        "Run a failed background task again, in its own session (it continues where the failed "
        "attempt stopped). A task has at most 3 attempts."
    ),
    parameters={
        "type": "object",
        "properties": {"task_id": _TASK_ID},
        "required": ["task_id"],
        "additionalProperties": False,
    },
    timeout_seconds=60.0,
)

TASK_STOP = ToolDef(
    name="task_stop",
    description="Stop a background task; says what the stop did (canceled, or it had already ended).",
    parameters={
        "type": "object",
        "properties": {
            "task_id": _TASK_ID,
            "reason": {"type": "string", "description": "Why, for the record (at most 500 characters)."},
        },
        "required": ["task_id"],
        "additionalProperties": False,
    },
    retry_safe=True,
    timeout_seconds=90.0,
)

TASK_TOOLS: tuple[ToolDef, ...] = (SPAWN_TASK, TASK_STATUS, TASK_RETRY, TASK_STOP)
TASK_TOOL_NAMES = frozenset(t.name for t in TASK_TOOLS)

BUILTIN: tuple[ToolDef, ...] = (EXEC_COMMAND, READ_FILE, WRITE_FILE, LIST_FILES, APPLY_PATCH, *TASK_TOOLS)
BY_NAME: dict[str, ToolDef] = {tool.name: tool for tool in BUILTIN}

#: exec_command as advertised when persistent shells are enabled (004 §2.7k).
EXEC_COMMAND_WITH_SHELLS = replace(
    EXEC_COMMAND,
    description=EXEC_COMMAND.description
    + " With session_id, the command runs in a persistent shell of that name instead: the working "
    "directory, exported variables, functions and its private /tmp carry over to the next call "
    "with the same session_id. A session command that times out or exits the shell ends the "
    "session; the next call starts a new shell.",
    parameters={
        **EXEC_COMMAND.parameters,
        "properties": {
            **EXEC_COMMAND.parameters["properties"],
            "session_id": {
                "type": "string",
                "description": "Name of a persistent shell to run in (created on first use); omit for "
                "a fresh one-shot shell.",
            },
        },
    },
)


def builtin(shells: bool) -> tuple[ToolDef, ...]:
    """Return the catalog as advertised: exec_command offers `session_id` only when shells are on."""
    if not shells:
        return BUILTIN
    return tuple(EXEC_COMMAND_WITH_SHELLS if t is EXEC_COMMAND else t for t in BUILTIN)
