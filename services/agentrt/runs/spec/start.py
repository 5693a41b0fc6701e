"""StartRun's request checks beyond the agent: labels and idempotency-key replays (004 §2.1).

Labels are caller metadata echoed by GetRun and ListRuns, so they are bounded: a page of runs
must fit a default client's 4 MiB message, and an error must not echo what it refuses in full.
An idempotency key names one request: a replay with the same key and the same request gets
the first run back; the same key with another request is refused, never silently answered
with a run that did something else.
"""

from __future__ import annotations

import hashlib

from agentrt.core.errors import Reason, invalid, quote
from agentrt.core.truncate import byte_len
from agentrt.v1 import run_service_pb2 as pb

#: At most this many labels per run.
MAX_LABELS = 64
#: A label key: 1 to 128 bytes of UTF-8 with no control characters.
MAX_LABEL_KEY_BYTES = 128
#: A label value: at most 1,024 bytes of UTF-8 with no control characters other than tab.
MAX_LABEL_VALUE_BYTES = 1024
#: The key under RunRecord.state holding the digest of the request that took an idempotency key.
DIGEST_STATE = "request_digest"


def _control(text: str, allow_tab: bool) -> bool:
    return any((ord(c) < 0x20 and not (allow_tab and c == "\t")) or 0x7F <= ord(c) < 0xA0 for c in text)


def check_labels(labels: dict[str, str]) -> None:
    """Refuse labels a run cannot carry.

    Raises:
        MeshError: INVALID_ARGUMENT/REQUEST_TOO_LARGE for more than MAX_LABELS labels or a key or
            value over its byte bound; INVALID_ARGUMENT/INVALID_VALUE for an empty key or a
            control character in a key or value. The message quotes a bounded prefix only.
    """
    if len(labels) > MAX_LABELS:
        raise invalid(
            Reason.REQUEST_TOO_LARGE,
            f"labels holds {len(labels)} entries, more than {MAX_LABELS}",
            field="labels",
        )
    for key, value in labels.items():
        if not key:
            raise invalid(Reason.INVALID_VALUE, "a label key is empty", field="labels")
        if byte_len(key) > MAX_LABEL_KEY_BYTES:
            raise invalid(
                Reason.REQUEST_TOO_LARGE,
                f"label key {quote(key)} is {byte_len(key)} bytes, more than {MAX_LABEL_KEY_BYTES}",
                field="labels",
            )
        if byte_len(value) > MAX_LABEL_VALUE_BYTES:
            raise invalid(
                Reason.REQUEST_TOO_LARGE,
                f"label {quote(key)} has a value of {byte_len(value)} bytes, more than "
                f"{MAX_LABEL_VALUE_BYTES}",
                field="labels",
            )
        if _control(key, allow_tab=False) or _control(value, allow_tab=True):
            raise invalid(
                Reason.INVALID_VALUE, f"label {quote(key)} holds a control character", field="labels"
            )


def check_idempotency_key(key: str) -> None:
    """Refuse an idempotency key of more than 256 characters or with a control character.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE (field `idempotency_key`).
    """
    if len(key) > 256:
        raise invalid(
            Reason.INVALID_VALUE, "idempotency_key is longer than 256 characters", field="idempotency_key"
        )
    if _control(key, allow_tab=False):
        raise invalid(
            Reason.INVALID_VALUE,
            f"idempotency_key {quote(key)} holds a control character",
            field="idempotency_key",
        )


def request_digest(req: pb.StartRunRequest) -> str:
    """Return the hex SHA-256 of the request without its idempotency key (deterministic bytes)."""
    copy = pb.StartRunRequest()
    copy.CopyFrom(req)
    copy.idempotency_key = ""
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def check_replay(req: pb.StartRunRequest, stored_digest: str) -> None:
    """Refuse a reuse of an idempotency key by another request.

    A run recorded before digests were kept (stored_digest empty) is answered as a replay.

    Raises:
        MeshError: INVALID_ARGUMENT/IDEMPOTENCY_KEY_REUSED when the digests differ.
    """
    if stored_digest and stored_digest != request_digest(req):
        raise invalid(
            Reason.IDEMPOTENCY_KEY_REUSED,
            f"idempotency_key {quote(req.idempotency_key)} was used by another StartRun request "
            "(a different input, agent, session or option); use a new key for a new run",
            field="idempotency_key",
        )
