"""Wire-level emulator of the OpenAI and Anthropic HTTP APIs, driven by a scripted reply list.

The official SDKs are pointed at it by base URL (OpenAI: `emu.base_url + "/v1"`,
Anthropic: `emu.base_url`); nothing in the product knows it is an emulator. It is a stdlib
ThreadingHTTPServer on 127.0.0.1 in a background thread, so the test process and a
separate gateway process can both talk to it.

Endpoints (all POST):
- /v1/responses                OpenAI Responses, JSON or `stream: true` SSE with the real event names
- /v1/responses/input_tokens   OpenAI input-token count
- /v1/chat/completions         Chat Completions, JSON or SSE chunks ending `data: [DONE]`
- /v1/messages                 Anthropic Messages, JSON or SSE (message_start ... message_stop)
- /v1/messages/count_tokens    Anthropic token count
- /_emulator/script            append replies (JSON list, same shape as --script)
- /_emulator/requests (GET)    the requests received so far
- /_emulator/rate_limit        rate-limit mode on ({"tokens": N, "window_seconds": W}) or off ({})
- /_emulator/intake (GET)      the model requests received: monotonic time, counted input tokens,
                               accepted or answered 429 (see "Rate-limit mode"); and
                               "connections", the TCP connections accepted so far

Every model endpoint takes the next reply from one FIFO script shared by all endpoints; an
empty script answers 500 with a message saying so. A test may set `responder`, a function
of (path, body) consulted before the script: the item it returns answers the request (and
consumes nothing), None leaves the request to the script. It is how a test answers by
what a request holds (a summary request, a request over a context window). The count endpoints do not consume
replies: they answer `token_count` when set, else `count_input_tokens` of the body.

Rate-limit mode (a provider's input-tokens-per-window limit, for limiter tests): every
model request's input is counted with `count_input_tokens` (the count endpoints' counter,
a deterministic quarter of the bytes of the request's input fields) and logged in
`intake`; a request that would take the accepted tokens of the last `window_seconds` over
`tokens` is answered 429 with Retry-After (the time until it would fit) and counts for
nothing. Accepted replies report the counted tokens as their input usage, and an empty
script answers a plain text reply instead of 500, so a load test needs no script.

A `Reply` with stop "context_window" is Anthropic's success-shaped
`model_context_window_exceeded`; OpenAI has no such shape, so its endpoints answer that
reply with their real 400 context_length_exceeded error instead.

Standalone: `python -m tests.emulators.providers --port N --script replies.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ToolCallReply:
    """One tool call of a scripted reply.

    Attributes:
        name: the tool name.
        arguments: the argument text, sent byte for byte (Anthropic JSON bodies embed it raw
            when it is valid JSON, and `{}` otherwise; streams always send it as is).
        id: the provider call id; generated when None.
    """

    name: str
    arguments: str = "{}"
    id: str | None = None


@dataclass
class Reply:
    """A scripted model answer.

    Attributes:
        text: assistant text (for stop "refusal": the refusal text).
        tool_calls: tool calls, in order.
        stop: "end_turn" | "tool_use" | "max_tokens" | "refusal" | "context_window"; None picks
            "tool_use" when there are tool calls, else "end_turn".
        input_tokens: input tokens reported (cached included).
        output_tokens: output tokens reported.
        cached_tokens: cached input tokens reported.
        reasoning_tokens: reasoning tokens reported (OpenAI).
        thinking: reasoning text: Anthropic signed thinking, OpenAI reasoning summary,
            Chat `reasoning_content`.
        model: model name reported; the request's model when None.
        stream_cut: end the stream before its terminal event.
        stream_malformed: send a data line that is not JSON in the middle of the stream.
        chunk_chars: characters per streamed delta.
        event_delay: seconds to wait between streamed events.
        stream_error: an ErrorReply kind ("overloaded", "rate_limit", ...): the stream sends
            half of its events, then the provider's in-stream error event, and ends.
        body_malformed: a non-streaming reply whose JSON body is cut in half.
        reply_delay: seconds to wait before a non-streaming reply is written; a client that
            hangs up meanwhile is counted in `ProviderEmulator.aborted_requests`.
        redacted_thinking: Anthropic redacted_thinking data (a block before the text).
        encrypted_reasoning: OpenAI reasoning `encrypted_content` (with `thinking`).
        response_id: the response's id on every API (Chat `id`, Responses `id`, Anthropic
            message `id`); a fresh one when None. A compatible server may repeat one.
        tool_index_zero: a Chat stream numbers every tool call `index` 0 (distinct ids), as
            some compatible servers do for parallel calls.
    """

    text: str = ""
    tool_calls: list[ToolCallReply] = field(default_factory=list)
    stop: str | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    thinking: str = ""
    model: str | None = None
    stream_cut: bool = False
    stream_malformed: bool = False
    chunk_chars: int = 8
    event_delay: float = 0.0
    stream_error: str | None = None
    body_malformed: bool = False
    reply_delay: float = 0.0
    redacted_thinking: str = ""
    encrypted_reasoning: str = ""
    response_id: str | None = None
    tool_index_zero: bool = False

    @property
    def stop_reason(self) -> str:
        """The effective stop."""
        return self.stop or ("tool_use" if self.tool_calls else "end_turn")


@dataclass
class ErrorReply:
    """A scripted HTTP error, in the shape of the provider whose endpoint was called.

    Attributes:
        status: HTTP status, e.g. 429, 500, 529, 400.
        retry_after: seconds sent as Retry-After (and retry-after-ms on OpenAI paths).
        message: the error message; a realistic one when None.
        kind: "rate_limit" | "overloaded" | "server_error" | "authentication" |
            "invalid_request" | "context_overflow"; derived from status when None.
    """

    status: int = 500
    retry_after: float | None = None
    message: str | None = None
    kind: str | None = None

    @property
    def effective_kind(self) -> str:
        """The kind, derived from the status when not given."""
        if self.kind:
            return self.kind
        if self.status == 429:
            return "rate_limit"
        if self.status in (503, 529):
            return "overloaded"
        if self.status >= 500:
            return "server_error"
        if self.status in (401, 403):
            return "authentication"
        return "invalid_request"


ScriptItem = Reply | ErrorReply


@dataclass(frozen=True)
class RateLimit:
    """The emulator's own input-token limit (rate-limit mode).

    Attributes:
        tokens: input tokens accepted per window.
        window_seconds: the sliding window, in seconds.
    """

    tokens: int
    window_seconds: float = 60.0


#: The fields of each API's request body that are model input (what count_input_tokens reads).
_INPUT_FIELDS = {
    "responses": ("instructions", "input", "tools"),
    "chat": ("messages", "tools"),
    "anthropic": ("system", "messages", "tools"),
}


def count_input_tokens(path: str, body: Any) -> int:
    """Return the emulator's deterministic input-token count of a request body (>= 1).

    A quarter (rounded up) of the UTF-8 bytes of the body's input fields (instructions /
    system, input / messages, tools) as compact JSON with sorted keys: the same for a
    request and its count-endpoint twin, whatever else the body carries.
    """
    if not isinstance(body, dict):
        return max(1, (len(str(body).encode()) + 3) // 4)
    api = "anthropic" if path.startswith("/v1/messages") else "chat" if "chat" in path else "responses"
    picked = {k: body[k] for k in _INPUT_FIELDS[api] if body.get(k) not in (None, "", [])}
    text = json.dumps(picked, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return max(1, (len(text.encode()) + 3) // 4)


_OPENAI_ERRORS = {
    "rate_limit": (
        "tokens",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again shortly.",
    ),
    "overloaded": ("server_error", None, "The engine is currently overloaded, please try again later"),
    "server_error": ("server_error", None, "The server had an error while processing your request."),
    "authentication": ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    "invalid_request": ("invalid_request_error", "invalid_value", "Invalid value for 'input'."),
    "context_overflow": (
        "invalid_request_error",
        "context_length_exceeded",
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
    ),
}
_ANTHROPIC_ERRORS = {
    "rate_limit": ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    "overloaded": ("overloaded_error", "Overloaded"),
    "server_error": ("api_error", "Internal server error"),
    "authentication": ("authentication_error", "invalid x-api-key"),
    "invalid_request": ("invalid_request_error", "messages: text content blocks must be non-empty"),
    "context_overflow": ("invalid_request_error", "prompt is too long: 215017 tokens > 200000 maximum"),
}


def reply_from_json(item: dict[str, Any]) -> ScriptItem:
    """Build a Reply or ErrorReply from its JSON shape (an object with "status" is an error)."""
    if "status" in item:
        return ErrorReply(**item)
    data = dict(item)
    data["tool_calls"] = [ToolCallReply(**tc) for tc in data.get("tool_calls") or []]
    return Reply(**data)


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-request (a cancelled stream) is ordinary here, not news."""

    # socketserver's default backlog of 5 resets connections when many callers connect at
    # once (a benchmark at 64 concurrent callers); a real provider accepts them.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ProviderEmulator:
    """The emulator server (see the module docstring). Also a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Start serving on host:port (0 picks a free port) in a daemon thread."""
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._ids = itertools.count(1)
        self.requests: list[tuple[str, Any]] = []
        #: Streams whose client went away before the stream was fully written.
        self.aborted_streams = 0
        #: Non-streaming calls whose client went away during their `reply_delay`.
        self.aborted_requests = 0
        #: TCP connections accepted (a client that pools connections opens few).
        self.connections = 0
        #: Answer of the count endpoints; None counts with count_input_tokens.
        self.token_count: int | None = None
        #: Rate-limit mode when set (see the module docstring).
        self.rate_limit: RateLimit | None = None
        #: Model requests received: (time.monotonic(), counted input tokens, accepted).
        self.intake: list[tuple[float, int, bool]] = []
        #: Answers a model request by its (path, body) before the script; None defers to it.
        self.responder: Callable[[str, Any], ScriptItem | None] | None = None
        self._server = _QuietServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="provider-emulator",
            daemon=True,
        )
        self._thread.start()

    def script(self, replies: list[ScriptItem]) -> None:
        """Append replies to the script (consumed in order by any model endpoint)."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Replies not yet consumed."""
        with self._lock:
            return len(self._script)

    def next_id(self) -> int:
        """Return a fresh number for ids."""
        return next(self._ids)

    def _take(self) -> ScriptItem | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _record(self, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((path, body))

    def _admit(self, tokens: int) -> float | None:
        """Log a model request; in rate-limit mode return the Retry-After of a refusal."""
        with self._lock:
            now = time.monotonic()
            limit = self.rate_limit
            if limit is None:
                self.intake.append((now, tokens, True))
                return None
            recent = [(t, n) for t, n, ok in self.intake if ok and t > now - limit.window_seconds]
            excess = sum(n for _, n in recent) + tokens - limit.tokens
            if excess <= 0:
                self.intake.append((now, tokens, True))
                return None
            self.intake.append((now, tokens, False))
            wait, freed = limit.window_seconds, 0
            for t, n in recent:
                freed += n
                if freed >= excess:
                    wait = t + limit.window_seconds - now
                    break
            return max(0.001, wait)

    def _note_abort(self) -> None:
        with self._lock:
            self.aborted_streams += 1

    def _note_abort_request(self) -> None:
        with self._lock:
            self.aborted_requests += 1

    def reset(self) -> None:
        """Forget every reply, request and mode: the state of a new emulator, on the same port.

        What a test sharing the emulator with earlier tests (a session-wide e2e mesh) starts
        from: an empty script, no requests, intake or aborts recorded, no responder, no
        rate-limit mode, no fixed token count. `connections` restarts at 0 as well (clients
        that pool connections keep theirs open, so it counts only connections opened after).
        """
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.intake.clear()
            self.aborted_streams = 0
            self.aborted_requests = 0
            self.connections = 0
            self.token_count = None
            self.rate_limit = None
            self.responder = None

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ProviderEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler_for(emu: ProviderEmulator) -> type[BaseHTTPRequestHandler]:
    from tests.emulators import _wire as wire

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; with Nagle on, the second waits for
        # the client's delayed ACK (~40 ms), which would make every model call look slow.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def setup(self) -> None:
            super().setup()
            with emu._lock:
                emu.connections += 1

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.split("?")[0] == "/_emulator/requests":
                with emu._lock:
                    data = [{"path": p, "body": b} for p, b in emu.requests]
                self._json(200, data)
            elif self.path.split("?")[0] == "/_emulator/intake":
                with emu._lock:
                    limit = emu.rate_limit
                    intake = [{"time": t, "tokens": n, "accepted": ok} for t, n, ok in emu.intake]
                    connections = emu.connections
                payload = {"rate_limit": limit and limit.__dict__, "requests": intake}
                self._json(200, {**payload, "connections": connections})
            else:
                self._json(404, {"error": {"message": f"no route GET {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else {}
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?")[0]
            if path == "/_emulator/script":
                emu.script([reply_from_json(x) for x in body])
                self._json(200, {"pending": emu.pending})
                return
            if path == "/_emulator/rate_limit":
                emu.rate_limit = RateLimit(**body) if body else None
                self._json(200, {"rate_limit": body or None})
                return
            emu._record(path, body)
            anthropic = path.startswith("/v1/messages")
            if path in ("/v1/responses/input_tokens", "/v1/messages/count_tokens"):
                count = emu.token_count if emu.token_count is not None else count_input_tokens(path, body)
                payload = {"input_tokens": count}
                if not anthropic:
                    payload["object"] = "response.input_tokens"
                self._json(200, payload)
                return
            if path not in ("/v1/responses", "/v1/chat/completions", "/v1/messages"):
                self._error(404, "invalid_request", f"emulator has no route POST {path}", anthropic)
                return
            tokens = count_input_tokens(path, body)
            retry_after = emu._admit(tokens)
            if retry_after is not None:
                self._error(429, "rate_limit", None, anthropic, retry_after)
                return
            item = emu.responder(path, body) if emu.responder is not None else None
            if item is None:
                item = emu._take()
            if emu.rate_limit is not None and not isinstance(item, ErrorReply):
                item = replace(item or Reply(text="ok"), input_tokens=tokens, cached_tokens=0)
            if item is None:
                self._error(
                    500,
                    "server_error",
                    f"provider emulator: the reply script is empty (request to {path})",
                    anthropic,
                )
                return
            if isinstance(item, ErrorReply):
                self._error(item.status, item.effective_kind, item.message, anthropic, item.retry_after)
                return
            if item.stop_reason == "context_window" and not anthropic:
                self._error(400, "context_overflow", None, anthropic)
                return
            model = item.model or (body.get("model") if isinstance(body, dict) else None) or "emulated-model"
            stream = isinstance(body, dict) and bool(body.get("stream"))
            n = emu.next_id()
            if path == "/v1/responses":
                events = wire.responses_events(item, model, n) if stream else None
                payload = wire.responses_object(item, model, n)
            elif path == "/v1/chat/completions":
                usage = bool(
                    ((body.get("stream_options") or {}) if isinstance(body, dict) else {}).get(
                        "include_usage"
                    )
                )
                events = wire.chat_chunks(item, model, n, usage) if stream else None
                payload = wire.chat_object(item, model, n)
            else:
                events = wire.anthropic_events(item, model, n) if stream else None
                payload = None
            if events is not None:
                if item.stream_error:
                    events = wire.with_stream_error(events, path, item.stream_error)
                self._sse(events, item)
                return
            if item.reply_delay and not self._wait_for(item.reply_delay):
                emu._note_abort_request()
                self.close_connection = True
                return
            text = json.dumps(payload) if payload is not None else wire.anthropic_body(item, model, n)
            self._text(200, text[: len(text) // 2] if item.body_malformed else text)

        def _wait_for(self, seconds: float) -> bool:
            """Wait seconds; return False as soon as the client closes the connection."""
            import select
            import socket

            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                if readable:
                    try:
                        if self.connection.recv(1, socket.MSG_PEEK) == b"":
                            return False
                    except OSError:
                        return False
                    time.sleep(min(left, 0.01))  # bytes of a next request: not a hang-up
            return True

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            self._text(status, json.dumps(payload), headers)

        def _text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_emu_{hashlib.sha1(data).hexdigest()[:12]}")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(
            self,
            status: int,
            kind: str,
            message: str | None,
            anthropic: bool,
            retry_after: float | None = None,
        ) -> None:
            headers: dict[str, str] = {}
            if retry_after is not None:
                headers["retry-after"] = f"{retry_after:g}"
                if not anthropic:
                    headers["retry-after-ms"] = str(int(retry_after * 1000))
            if anthropic:
                etype, default = _ANTHROPIC_ERRORS.get(kind, _ANTHROPIC_ERRORS["server_error"])
                payload: dict[str, Any] = {
                    "type": "error",
                    "error": {"type": etype, "message": message or default},
                    "request_id": "req_emulated",
                }
            else:
                etype, code, default = _OPENAI_ERRORS.get(kind, _OPENAI_ERRORS["server_error"])
                payload = {
                    "error": {"message": message or default, "type": etype, "param": None, "code": code}
                }
            self._json(status, payload, headers)

        def _sse(self, events: list[tuple[str | None, str]], reply: Reply) -> None:
            if reply.stream_malformed:
                half = len(events) // 2
                # Named like its neighbour, so SDKs that skip unnamed events still parse it.
                events = [*events[:half], (events[half][0], "{this is not json"), *events[half:]]
            frames = [
                ((f"event: {name}\n" if name else "") + f"data: {data}\n\n").encode() for name, data in events
            ]
            # The whole stream's length is known up front, so the connection can stay open
            # for the next request, as a real provider's keep-alive connection would.
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("content-length", str(sum(len(f) for f in frames)))
            self.end_headers()
            try:
                for frame in frames:
                    self.wfile.write(frame)
                    self.wfile.flush()
                    if reply.event_delay:
                        time.sleep(reply.event_delay)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                emu._note_abort()

    return Handler


def main(argv: list[str] | None = None) -> int:
    """Run the emulator as a process until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="OpenAI/Anthropic wire emulator")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--script", default=None, help="JSON file: a list of replies")
    parser.add_argument("--rate-limit-tokens", type=int, default=0, help="rate-limit mode: tokens per window")
    parser.add_argument("--rate-limit-window", type=float, default=60.0, help="rate-limit window, seconds")
    args = parser.parse_args(argv)
    emu = ProviderEmulator(args.host, args.port)
    if args.rate_limit_tokens:
        emu.rate_limit = RateLimit(args.rate_limit_tokens, args.rate_limit_window)
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            emu.script([reply_from_json(x) for x in json.load(fh)])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"provider emulator listening on {emu.base_url}", flush=True)
    stop.wait()
    emu.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
