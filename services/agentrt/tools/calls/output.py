"""Bounded output capture: keep the head and the live tail, drop the middle with a marker.

Invariants: a `CappedOutput` never holds more than `cap_bytes` bytes however much is fed
to it; the first half of the cap is the head (kept as it arrived), the second half the most
recent bytes. `text()` joins them with a marker naming how many bytes were dropped, so the
model sees both how a command started and how it ended (004 §2.7k "head and live tail").
The text is at most `cap_bytes` bytes of UTF-8, the marker included, cut on character
boundaries (`core.truncate.head_tail`, seed 000 Truncate): the head is a prefix and the
tail a suffix of the real output.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable

from agentrt.core.truncate import head_tail


def marker(dropped_bytes: int) -> str:
    """Return the line that stands where dropped output was (dropped_bytes: bytes not shown)."""
    return f"\n[... {dropped_bytes} bytes of output dropped ...]\n"


class CappedOutput:
    """Output bounded to head + tail bytes (see the module docstring)."""

    def __init__(self, cap_bytes: int) -> None:
        """Create an empty capture keeping at most cap_bytes bytes (split head/tail)."""
        self._head_cap = cap_bytes - cap_bytes // 2
        self._tail_cap = cap_bytes // 2
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total_bytes = 0

    @property
    def dropped_bytes(self) -> int:
        """Bytes fed but not kept."""
        return self.total_bytes - len(self._head) - self._tail_len

    @property
    def truncated(self) -> bool:
        """True when `text()` leaves some of the output out."""
        return self._bounded()[1]

    def feed(self, data: bytes) -> None:
        """Append data, dropping from the middle once the cap is reached."""
        self.total_bytes += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or self._tail_cap == 0:
            return
        if len(data) >= self._tail_cap:
            self._tail.clear()
            self._tail.append(bytes(data[-self._tail_cap :]))
            self._tail_len = self._tail_cap
            return
        self._tail.append(bytes(data))
        self._tail_len += len(data)
        while self._tail_len > self._tail_cap:
            excess = self._tail_len - self._tail_cap
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_len -= len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_len -= excess

    def text(self) -> str:
        """Return the output as text of at most cap_bytes bytes, marker included (invalid bytes as U+FFFD)."""
        return self._bounded()[0]

    def _bounded(self) -> tuple[str, bool]:
        return head_tail(
            bytes(self._head), b"".join(self._tail), self.total_bytes, self._head_cap + self._tail_cap, marker
        )


class ProgressBudget:
    """Decodes chunks per stream and forwards them to a sink until a byte budget is spent.

    Once spent, one notice is sent and the rest is only captured, never streamed: a
    flooding command cannot make the progress stream unbounded (004 §2.7g "streaming must
    not cost the model its output": the capture is independent of this budget).
    """

    def __init__(self, sink: Callable[[str, str], None] | None, budget_bytes: int) -> None:
        """Forward to sink(stream, text) at most budget_bytes bytes; sink None disables."""
        self._sink = sink
        self._left = budget_bytes
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}
        self._noticed = False

    def feed(self, stream: str, data: bytes) -> None:
        """Forward a chunk of `stream` ("stdout" or "stderr")."""
        if self._sink is None or self._noticed:
            return
        if len(data) > self._left:
            self._noticed = True
            self._sink(stream, "\n[... progress suppressed; the result carries the output ...]\n")
            return
        self._left -= len(data)
        decoder = self._decoders.setdefault(stream, codecs.getincrementaldecoder("utf-8")(errors="replace"))
        text = decoder.decode(data)
        if text:
            self._sink(stream, text)
