"""One persistent shell: the bash protocol spoken over a `Terminal` (004 §2.7k).

What is written to the PTY:
- once, after the spawn, `_INIT`: empty prompts; history, `!` expansion and job control
  off; errtrace on; a saved copy of stdout for the completion line; the ERR trap
  `__agentrt_err` and the completion printer `__agentrt_end`; PAGER and GIT_PAGER default
  to cat (on a terminal a pager would wait for a key that never comes).
- per command, ONE line, after an empty one (which resets bash's parser, see `_line`):
  `{ __agentrt_st=; PROMPT_COMMAND='{ __agentrt_end H1 H2; } 2>/dev/null'; } 2>/dev/null;`
  `[cd -- DIR && ]eval $'CMD' </dev/null`
  The command travels as an ANSI-C quoted string of printable ASCII (every other byte
  escaped as a two-digit hex escape): one line whatever it holds; an unbalanced quote or a
  heredoc stays inside eval (status 2, never a shell waiting for more input); stdin is
  /dev/null as for a one-shot command. eval runs in the shell itself, so cd, exports,
  functions and an activated environment persist.

Completion: bash runs PROMPT_COMMAND whenever it comes back to its prompt, however the line
ended (normally, discarded by an error such as `set -u`, or aborted by the ERR trap), and
it prints `H1H2 <status> <aborted>`. The random per-session halves are joined only in that
output: the line, its echo and `echo $PROMPT_COMMAND` hold them apart.

`set -e` survives: errexit would exit the shell, so the ERR trap (main shell only) records
the failing status and sends the shell SIGINT, which abandons the line exactly where
errexit would have stopped and returns to the prompt. bash prints one newline on stderr
for that; `aborted` 1 says so, and that newline (the byte just before the token) is dropped.

Reading (`_Scanner`, on the event loop): the first bytes are dropped only when they are
exactly the line written (an echo, or bash's verbose mode), never by pattern; at the end,
only the exact texts bash itself adds in verbose mode are dropped. Bytes reach the capped
capture and the progress stream as they come, except a tail that could still be the start
of the completion (a newline, a prefix of the token), held until the next read decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.tools.calls.output import CappedOutput, ProgressBudget
from agentrt.tools.sandbox.spec import CallerDeadline
from agentrt.tools.shell.terminal import Terminal

_STATUS_LINE_MAX = 40
_ERR_TRAP = "{ __agentrt_err; } 2>/dev/null"
#: what verbose mode prints when the ERR trap runs
_TRAP_ECHO = (_ERR_TRAP + "\n").encode()
_INIT = (
    "PS1= PS2= PS0=; unset PROMPT_COMMAND HISTFILE; set +o history +m +H -E; "
    ': "${PAGER:=cat}" "${GIT_PAGER:=cat}"; export PAGER GIT_PAGER; exec {__agentrt_out}>&1\n'
    '__agentrt_err() { local s=$?; if [[ $- == *e* && $BASHPID == "$$" ]]; then '
    "__agentrt_st=$s __agentrt_cut=1; kill -INT $$; fi; }\n"
    "__agentrt_end() { local s=${__agentrt_st:-$?} c=${__agentrt_cut:-0}; "
    "__agentrt_st= __agentrt_cut= PROMPT_COMMAND= PS1= PS0= PS2=; "
    'printf \'%s%s %d %d\\n\' "$1" "$2" "$s" "$c" >&"$__agentrt_out"; }\n'
    f"trap '{_ERR_TRAP}' ERR\n"
)


def quote(text: str) -> str:
    """Return text as a bash ANSI-C string `$'...'` of printable ASCII only.

    Raises:
        ValueError: text contains NUL (bash would cut the string there).
    """
    if "\x00" in text:
        raise ValueError("NUL character")
    out = []
    for byte in text.encode("utf-8", "replace"):
        out.append(chr(byte) if 0x20 <= byte < 0x7F and byte not in b"\\'!" else f"\\x{byte:02x}")
    return "$'" + "".join(out) + "'"


@dataclass(frozen=True)
class ShellCommand:
    """One command for a named shell.

    Attributes:
        command: the shell text, eval'd in the shell.
        workdir: host path to `cd` into first (the change persists); "" stays where the shell is.
        timeout_seconds: the shell's own timer, seconds; when it fires the shell is closed.
        max_output_bytes: output kept (head + tail), bytes.
    """

    command: str
    workdir: str
    timeout_seconds: float
    max_output_bytes: int


@dataclass
class ShellResult:
    """How a command in a named shell ended.

    Attributes:
        output: what it printed (stdout and stderr share the PTY), head and tail kept.
        truncated: some output was dropped.
        total_bytes: bytes it printed.
        duration_seconds: wall time, seconds.
        exit_code: the status the shell reported; None when it reported none.
        timed_out: the shell's own timer ended it (the shell was closed).
        error: why there is no exit status (the shell exited, was closed, or failed); "" otherwise.
        fresh: a new shell was opened for this command.
    """

    output: str
    truncated: bool
    total_bytes: int
    duration_seconds: float
    exit_code: int | None = None
    timed_out: bool = False
    error: str = ""
    fresh: bool = False


class _Scanner:
    """Splits the PTY's bytes into the echo, the command's output and the completion line."""

    def __init__(
        self,
        token: bytes,
        echo: bytes,
        trailer: bytes,
        capture: CappedOutput,
        progress: ProgressBudget | None,
    ) -> None:
        self._token = token
        # The line as written, or as an ONLCR line discipline would echo it.
        self._echoes = (echo, echo.replace(b"\n", b"\r\n"))
        self._trailer = trailer  # what verbose mode prints when PROMPT_COMMAND runs
        # Every way the output can end (what `_status` strips, then the token): bytes are
        # held back only while they could be the start of one of these.
        self._endings = [
            lead + middle + token for lead in (b"", b"\n", _TRAP_ECHO + b"\n") for middle in (b"", trailer)
        ]
        self._capture = capture
        self._progress = progress
        self._pending = bytearray()
        self._phase = "echo"
        self._after = bytearray()
        self.status: int | None = None
        self.malformed = False

    @property
    def complete(self) -> bool:
        """True once the completion line has been read."""
        return self._phase == "done"

    def feed(self, data: bytes) -> None:
        """Take the next bytes read from the PTY."""
        if self._phase == "done":
            return
        if self._phase == "status":
            self._status(data)
            return
        self._pending += data
        if self._phase == "echo":
            if any(e.startswith(self._pending) for e in self._echoes):
                return  # so far, exactly the line written: wait to see all of it
            for echo in self._echoes:
                if self._pending.startswith(echo):
                    del self._pending[: len(echo)]
                    break
            self._phase = "body"
        at = self._pending.find(self._token)
        if at >= 0:
            body = bytes(self._pending[:at])
            rest = bytes(self._pending[at + len(self._token) :])
            self._pending = bytearray(body)
            self._phase = "status"
            self._status(rest)
            return
        keep = self._held()
        if len(self._pending) > keep:
            self._commit(bytes(self._pending[: len(self._pending) - keep]))
            del self._pending[: len(self._pending) - keep]

    def _held(self) -> int:
        """Length of the longest tail of pending that could begin one of the endings."""
        pending, best = self._pending, 0
        for ending in self._endings:
            for k in range(min(len(pending), len(ending) - 1), best, -1):
                if pending.endswith(ending[:k]):
                    best = k
                    break
        return best

    def _status(self, data: bytes) -> None:
        self._after += data
        end = self._after.find(b"\n")
        if end < 0:
            if len(self._after) > _STATUS_LINE_MAX:
                self._finish_malformed()
            return
        fields = bytes(self._after[:end]).split()
        try:
            status, aborted = int(fields[0]), int(fields[1])
        except (ValueError, IndexError):
            self._finish_malformed()
            return
        if self._pending.endswith(self._trailer):
            del self._pending[-len(self._trailer) :]  # bash's verbose mode echoing PROMPT_COMMAND
        if aborted and self._pending.endswith(b"\n"):
            del self._pending[-1:]  # bash's newline after the ERR trap's SIGINT
            if self._pending.endswith(_TRAP_ECHO):
                del self._pending[-len(_TRAP_ECHO) :]  # verbose mode echoing the trap
        self.status = status
        self.flush()
        self._phase = "done"

    def _finish_malformed(self) -> None:
        self.malformed = True
        self.flush()
        self._phase = "done"

    def flush(self) -> None:
        """Commit whatever is held back (the command ended without a clean completion line)."""
        if self._pending:
            self._commit(bytes(self._pending))
            self._pending.clear()

    def _commit(self, data: bytes) -> None:
        self._capture.feed(data)
        if self._progress is not None:
            self._progress.feed("stdout", data)


class Shell:
    """A bash on a `Terminal`, running one command at a time (callers hold `lock`)."""

    def __init__(self, terminal: Terminal, max_progress_bytes: int) -> None:
        """Wrap a freshly opened terminal; `start()` must succeed before `run()`."""
        self.terminal = terminal
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        #: why the shell can no longer be used ("" while it can)
        self.closed = ""
        self._halves = (secrets.token_hex(8), secrets.token_hex(8))
        self._token = "".join(self._halves).encode()
        self._max_progress = max_progress_bytes
        self._scan: _Scanner | None = None
        self._done: asyncio.Future[str] | None = None
        self.stray_bytes = 0
        terminal.start(self._on_data, self._on_end)

    # -- the protocol ---------------------------------------------------------------------

    def _prompt_command(self) -> str:
        h1, h2 = self._halves
        return "{ __agentrt_end " + h1 + " " + h2 + "; } 2>/dev/null"

    def _scanner(self, line: str, capture: CappedOutput, progress: ProgressBudget | None) -> _Scanner:
        trailer = (self._prompt_command() + "\n").encode()
        return _Scanner(self._token, line.encode(), trailer, capture, progress)

    def _line(self, command: str, workdir: str) -> str:
        cd = f"cd -- {quote(workdir)} && " if workdir else ""
        # The leading empty line resets bash's parser: after an eval that hit EOF inside a
        # quote, bash 5.2 does not take the next line's first word as a reserved word.
        return (
            f"\n{{ __agentrt_st=; PROMPT_COMMAND='{self._prompt_command()}'; }} 2>/dev/null; "
            f"{cd}eval {quote(command)} </dev/null\n"
        )

    def _on_data(self, data: bytes) -> None:
        if self._scan is None:
            self.stray_bytes += len(data)  # a background job between commands: nobody's output
            return
        self._scan.feed(data)
        if self._scan.complete:
            self._scan = None  # anything after the completion line belongs to nobody
            if self._done is not None and not self._done.done():
                self._done.set_result("")

    def _on_end(self, why: str) -> None:
        self.closed = self.closed or why
        if self._done is not None and not self._done.done():
            self._done.set_result(self.closed)

    async def _exchange(self, text: str, scan: _Scanner, limit: float) -> str | None:
        """Write text and wait for the completion line.

        Returns:
            "" when it came, the reason when the shell ended or failed first, None when
            `limit` seconds passed first.
        """
        if self.closed:
            return self.closed
        self._scan, self._done = scan, asyncio.get_running_loop().create_future()
        done = self._done

        async def send() -> str:
            self.terminal.prepare()
            try:
                await self.terminal.write(text.encode())
            except OSError as exc:
                return self.closed or f"writing to the shell failed: {exc.strerror or exc}"
            return await done

        task = asyncio.ensure_future(send())
        try:
            finished, _ = await asyncio.wait({task}, timeout=max(0.0, limit))
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not finished:
            task.cancel()
            return None
        return task.result()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, limit: float) -> str:
        """Send the setup and wait until the shell answers; "" when ready, else why not.

        On failure the reason carries what the shell printed (a launcher's complaint).
        """
        capture = CappedOutput(2048)
        text = _INIT + self._line(":", "")
        ended = await self._exchange(text, self._scanner(text, capture, None), limit)
        if ended == "" and not self.closed:
            return ""
        why = ended or f"it did not answer within {limit:g} s"
        printed = capture.text().strip()
        await self.close(why)
        return f"the shell could not be started: {why}" + (f" ({printed[-500:]})" if printed else "")

    async def run(
        self, cmd: ShellCommand, *, emit: Callable[[str, str], None] | None, deadline: float | None
    ) -> ShellResult:
        """Run one command; the caller holds `lock`.

        Args:
            cmd: the command.
            emit: receives ("stdout", text) progress chunks (004 §2.7g); None for none.
            deadline: the caller's deadline on the event loop's clock, or None.

        Returns:
            The result. The shell is closed (everything it started killed) before a result
            with `timed_out` or `error` returns.

        Raises:
            CallerDeadline: the caller's deadline came first (the shell was closed).
            asyncio.CancelledError: the caller went away (the shell was closed).
        """
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        capture = CappedOutput(cmd.max_output_bytes)
        line = self._line(cmd.command, cmd.workdir)
        scan = self._scanner(line, capture, ProgressBudget(emit, self._max_progress))
        caller_left = None if deadline is None else deadline - loop.time()
        limit = cmd.timeout_seconds if caller_left is None else min(cmd.timeout_seconds, caller_left)
        try:
            ended = await self._exchange(line, scan, limit)
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.close("the caller cancelled the command"))
            raise
        self.last_used = time.monotonic()
        if ended is None:
            # The caller's ending is checked first (§2.7m): a tie is the caller's.
            caller_first = caller_left is not None and caller_left <= cmd.timeout_seconds
            await self.close("the caller's deadline passed" if caller_first else "the command timed out")
            scan.flush()
            if caller_first:
                raise CallerDeadline(capture.text())
        elif ended:
            await self.close(ended)  # whatever is left of it goes too
            scan.flush()
        elif scan.malformed:
            await self.close("the shell's completion line was malformed")
        result = ShellResult(
            output=capture.text(),
            truncated=capture.truncated,
            total_bytes=capture.total_bytes,
            duration_seconds=time.monotonic() - started,
        )
        if ended is None:
            result.timed_out = True
        elif ended or scan.status is None:
            result.error = ended or self.closed
        else:
            result.exit_code = scan.status
        return result

    async def close(self, why: str) -> None:
        """Close the shell: the waiting command (if any) wakes with `why`, then everything dies.

        Idempotent; returns once the shell's processes are gone.
        """
        self.closed = self.closed or why
        if self._done is not None and not self._done.done():
            self._done.set_result(self.closed)
        await self.terminal.close()
