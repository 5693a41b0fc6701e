"""Workspace archives: unpack an uploaded tar into a workspace, stream one out of it.

Targets resolve as ExecuteTool's do (`SandboxManager.context_for`): a sandbox's workspace,
a checked workspace path, or a run's default workspace; `path` names a directory inside,
resolved by `paths.resolve` (it cannot leave the workspace, symlinks included).

Upload invariants:
- The archive is plain tar or gzip, read as a stream (never held whole): at most
  `max_archive_bytes` as received and at most that many bytes of file content unpacked
  (a member declaring more is refused before anything of it is written).
- Members are checked and written by `archive.tar.unpack` (data filter, then descriptor
  walks: nothing is ever written outside the workspace, symlinks included).
- Not all-or-nothing: members before a refused one stay; nothing lands outside.
Download invariants: a tar (optionally gzip) streamed in chunks of at most 1 MiB while it
is produced; symlinks are stored as links and never followed; FIFOs, sockets and devices
are skipped; memory stays bounded by a few chunks whatever the directory's size.

The blocking tar work (`archive/tar.py`) runs on a small dedicated thread pool so that slow
transfers never starve the file tools of the default executor; the event loop side only
moves chunks through a bounded hand-off (`_Bridge`). A transfer whose caller goes away
makes its worker fail at the next chunk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agentrt.core.errors import MeshError, Reason, invalid, missing, quote
from agentrt.core.ids import valid_id
from agentrt.tools.archive.tar import CHUNK_BYTES, Unpacked, open_target_dir, pack, relative_path, unpack
from agentrt.tools.files.paths import Workspace
from agentrt.tools.sandbox.manager import SandboxManager

_TRANSFER_THREADS = 8
_QUEUE_CHUNKS = 4
_LOOP_CHECK_S = 5.0


@dataclass(frozen=True)
class Target:
    """Where an archive goes or comes from (see the proto's WorkspaceTarget)."""

    sandbox_id: str = ""
    workspace: str = ""
    run_id: str = ""
    path: str = ""


class _Aborted(Exception):
    """The event-loop side went away; the worker stops at its next chunk."""


class _Bridge:
    """A bounded hand-off of chunks between the event loop and one worker thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=_QUEUE_CHUNKS)
        self._lock = threading.Lock()
        self._aborted = False
        self._pending: concurrent.futures.Future[Any] | None = None

    def _wait(self, coro: Any) -> Any:
        with self._lock:
            if self._aborted:
                coro.close()
                raise _Aborted
            fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
            self._pending = fut
        while True:
            try:
                return fut.result(timeout=_LOOP_CHECK_S)
            except concurrent.futures.CancelledError:
                raise _Aborted from None
            except concurrent.futures.TimeoutError:
                # A loop that stopped without aborting us (shutdown) must not pin this thread.
                if self._aborted or self.loop.is_closed() or not self.loop.is_running():
                    fut.cancel()
                    raise _Aborted from None

    def get(self) -> bytes | None:
        """Worker side: the next chunk, None at the end."""
        return self._wait(self.queue.get())

    def put(self, chunk: bytes | None) -> None:
        """Worker side: hand over a chunk (blocks while the queue is full)."""
        self._wait(self.queue.put(chunk))

    def abort(self) -> None:
        """Loop side: make the worker's current and next hand-off fail."""
        with self._lock:
            self._aborted = True
            if self._pending is not None:
                self._pending.cancel()


class _Incoming(io.RawIOBase):
    """The uploaded bytes as a blocking file object for tarfile (worker side)."""

    def __init__(self, bridge: _Bridge, first: bytes) -> None:
        self._bridge, self._buf, self._pos, self._eof = bridge, first, 0, False

    def readable(self) -> bool:
        return True

    def _fill(self, n: int) -> None:
        while len(self._buf) - self._pos < n and not self._eof:
            chunk = self._bridge.get()
            if chunk is None:
                self._eof = True
            else:
                self._buf, self._pos = self._buf[self._pos :] + chunk, 0

    def head(self, n: int) -> bytes:
        """The next n bytes (fewer at the end), without consuming them."""
        self._fill(n)
        return self._buf[self._pos : self._pos + n]

    def readinto(self, b: Any) -> int:
        self._fill(1)
        n = min(len(b), len(self._buf) - self._pos)
        b[:n] = self._buf[self._pos : self._pos + n]
        self._pos += n
        return n


class _Outgoing(io.RawIOBase):
    """A write-only file object that hands ≤ 1 MiB chunks to the event loop (worker side)."""

    def __init__(self, bridge: _Bridge) -> None:
        self._bridge, self._buf = bridge, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._buf += b
        while len(self._buf) >= CHUNK_BYTES:
            self._bridge.put(bytes(self._buf[:CHUNK_BYTES]))
            del self._buf[:CHUNK_BYTES]
        return len(b)

    def flush_all(self) -> None:
        """Hand over what is buffered."""
        if self._buf:
            self._bridge.put(bytes(self._buf))
            self._buf.clear()


class WorkspaceArchives:
    """UploadWorkspace and DownloadWorkspace over the sandbox manager (see the module docstring)."""

    def __init__(self, sandboxes: SandboxManager, max_archive_bytes: int) -> None:
        """Serve archives of the workspaces `sandboxes` resolves, bounded by max_archive_bytes."""
        self._sandboxes = sandboxes
        self._max = max_archive_bytes
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(_TRANSFER_THREADS, "agentrt-archive")
        return self._pool

    async def _workspace(self, tenant: str, target: Target, *, create: bool) -> tuple[Workspace, str]:
        if not (target.sandbox_id or target.workspace or target.run_id):
            raise missing("target")
        if target.run_id and not target.sandbox_id and not target.workspace and not valid_id(target.run_id):
            raise invalid(
                Reason.INVALID_ID, f"malformed run_id {quote(target.run_id)}", field="target.run_id"
            )
        base = relative_path(target.path, "target.path")
        ctx = await self._sandboxes.context_for(
            tenant, target.run_id, target.sandbox_id, target.workspace, create=create
        )
        return ctx.workspace, base

    async def upload(self, tenant: str, target: Target, chunks: AsyncIterator[bytes]) -> Unpacked:
        """Unpack a tar (plain or gzip) arriving as chunks into the target directory.

        Args:
            tenant: the caller's tenant.
            target: where to unpack; `path` is created when missing.
            chunks: the archive's bytes in order, each at most 1 MiB.

        Returns:
            The regular files and bytes of content written.

        Raises:
            MeshError: INVALID_ARGUMENT with MISSING_FIELD (no target), INVALID_ID,
                INVALID_VALUE (bad workspace, path or member conflicts), MALFORMED_ARCHIVE,
                PATH_OUTSIDE_WORKSPACE, REQUEST_TOO_LARGE (a chunk over 1 MiB, the archive or
                its content over the bound, too many members); NOT_FOUND/SANDBOX_NOT_FOUND;
                FAILED_PRECONDITION/SANDBOX_STOPPED.
        """
        ws, base = await self._workspace(tenant, target, create=True)
        it = chunks.__aiter__()
        first, received = b"", 0
        while not first:
            got = await anext(it, None)
            if got is None:
                raise invalid(
                    Reason.MALFORMED_ARCHIVE,
                    "the archive is empty: send a tar (plain or gzip) in the data chunks",
                    field="data",
                )
            first, received = got, self._count(received, got)
        loop = asyncio.get_running_loop()
        bridge = _Bridge(loop)
        job = loop.run_in_executor(self._executor(), unpack, ws, base, _Incoming(bridge, first), self._max)
        helpers: list[asyncio.Future[Any]] = []
        try:
            ended = False
            while not ended:
                read: asyncio.Future[Any] = asyncio.ensure_future(anext(it, None))
                helpers[:] = [read]
                await asyncio.wait({read, job}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.cancel()
                    break  # the archive ended (or failed) before the stream did
                chunk = read.result()
                if chunk is None:
                    ended = True
                else:
                    received = self._count(received, chunk)
                put: asyncio.Future[Any] = asyncio.ensure_future(bridge.queue.put(chunk))
                helpers[:] = [put]
                await asyncio.wait({put, job}, return_when=asyncio.FIRST_COMPLETED)
                if not put.done():
                    put.cancel()
                    break
            return await job
        except asyncio.CancelledError:
            bridge.abort()
            # The worker ends at its next read (_Aborted): nobody's news, so mark it retrieved
            # (else asyncio logs "Future exception was never retrieved" when it is collected).
            job.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        except BaseException as exc:
            bridge.abort()
            with contextlib.suppress(BaseException):
                await asyncio.wait({job})
            failed = job.exception() if job.done() and not job.cancelled() else None
            # The worker's own refusal (say, a member outside) explains more than the feed's.
            if isinstance(failed, MeshError) and failed is not exc:
                raise failed from None
            raise
        finally:
            for helper in helpers:  # a read or put still pending when the upload ended
                helper.cancel()

    def _count(self, received: int, chunk: bytes) -> int:
        if len(chunk) > CHUNK_BYTES:
            raise invalid(
                Reason.REQUEST_TOO_LARGE,
                f"an upload message carries {len(chunk)} bytes; at most {CHUNK_BYTES} per message",
                field="data",
            )
        received += len(chunk)
        if received > self._max:
            raise invalid(
                Reason.REQUEST_TOO_LARGE,
                f"the archive is larger than {self._max} bytes",
                field="data",
                limit_bytes=str(self._max),
            )
        return received

    async def download(self, tenant: str, target: Target, *, gzip: bool) -> AsyncIterator[bytes]:
        """Stream a tar of the target directory in chunks of at most 1 MiB.

        Entries are named relative to the directory (which is not itself an entry), in
        name order, directories before their contents; symlinks are stored, not followed.

        Nothing is ever created: a missing workspace (an unknown run's, say) or directory
        is NOT_FOUND.

        Raises:
            MeshError: INVALID_ARGUMENT with MISSING_FIELD, INVALID_ID, INVALID_VALUE (bad
                workspace, or path not a directory), PATH_OUTSIDE_WORKSPACE;
                NOT_FOUND/SANDBOX_NOT_FOUND, WORKSPACE_NOT_FOUND (the workspace or path does
                not exist); FAILED_PRECONDITION/SANDBOX_STOPPED, or INVALID_VALUE mid-stream
                for a tree deeper than MAX_DEPTH.
        """
        ws, base = await self._workspace(tenant, target, create=False)
        dir_fd = await asyncio.to_thread(open_target_dir, ws, base)
        loop = asyncio.get_running_loop()
        bridge = _Bridge(loop)
        job = loop.run_in_executor(self._executor(), _pack_job, dir_fd, _Outgoing(bridge), gzip, bridge)
        try:
            while True:
                chunk = await bridge.queue.get()
                if chunk is None:
                    break
                yield chunk
            await job
        finally:
            if not job.done():
                bridge.abort()
                with contextlib.suppress(BaseException):
                    await asyncio.wait({job})


def _pack_job(dir_fd: int, out: _Outgoing, gzip: bool, bridge: _Bridge) -> None:
    """Worker side of a download: pack, hand over the rest, then the end (None)."""
    try:
        pack(dir_fd, out, gzip)  # type: ignore[arg-type]  # a write-only RawIOBase
        out.flush_all()
    except _Aborted:
        return
    finally:
        with contextlib.suppress(_Aborted):
            bridge.put(None)
