"""The stable error reasons are one vocabulary in three places that must agree.

`agentrt.core.errors.Reason` (what domain code raises), the proto enum `agentrt.v1.ErrorReason`
(the contract every client switches on) and the table of docs/errors.md. A reason added to one
and not the others fails here, naming it, so a merge of branches that each add reasons cannot
land a reason a client has no value for.
"""

from __future__ import annotations

import pathlib
import re

from google.rpc import error_details_pb2

from agentrt.core.errors import ERROR_DOMAIN, MeshError, Reason, Status
from agentrt.mesh.status import to_rpc_status
from agentrt.v1 import error_reason_pb2

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROTO = ROOT / "protos" / "agentrt" / "v1" / "error_reason.proto"
DOC = ROOT / "docs" / "errors.md"
UNSPECIFIED = "ERROR_REASON_UNSPECIFIED"
STATUS_NAMES = [s.value for s in Status]


def _enum_names() -> dict[str, int]:
    return {name: number for name, number in error_reason_pb2.ErrorReason.items() if name != UNSPECIFIED}


def _proto_statuses() -> dict[str, set[str]]:
    """Value name -> the status codes its comment opens with ("STATUS:" or "STATUS (...):")."""
    out: dict[str, set[str]] = {}
    comment: list[str] = []
    for line in PROTO.read_text().splitlines():
        text = line.strip()
        if text.startswith("//"):
            comment.append(text[2:].strip())
            continue
        match = re.match(r"([A-Z0-9_]+) = \d+;", text)
        if match:
            joined = " ".join(comment)
            out[match.group(1)] = {s for s in STATUS_NAMES if re.search(rf"\b{s}\b(?=:| \()", joined)}
        comment = []
    return out


def _doc_rows() -> list[tuple[str, int, set[str]]]:
    rows = []
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| `([A-Z0-9_]+)` \| (\d+) \| ([^|]+) \|", line)
        if match:
            statuses = {s for s in STATUS_NAMES if re.search(rf"\b{s}\b", match.group(3))}
            rows.append((match.group(1), int(match.group(2)), statuses))
    return rows


def test_every_python_reason_has_an_enum_value():
    missing = sorted(r.value for r in Reason if r.value not in _enum_names())
    assert not missing, (
        "reasons in agentrt.core.errors.Reason with no agentrt.v1.ErrorReason value "
        f"(add them to protos/agentrt/v1/error_reason.proto, then `make protos`): {', '.join(missing)}"
    )


def test_every_enum_value_has_a_python_reason():
    python = {r.value for r in Reason}
    missing = sorted(name for name in _enum_names() if name not in python)
    assert not missing, (
        "agentrt.v1.ErrorReason values with no agentrt.core.errors.Reason member "
        f"(add them to services/agentrt/core/errors.py): {', '.join(missing)}"
    )


def test_every_enum_value_comment_names_its_status():
    statuses = _proto_statuses()
    silent = sorted(n for n in _enum_names() if not statuses.get(n) and n != "REFUSAL")
    assert not silent, f"ErrorReason values whose comment does not open with a gRPC status: {silent}"


def test_the_docs_table_lists_every_reason_once_with_the_enums_number_and_status():
    rows = _doc_rows()
    names = [name for name, _, _ in rows]
    enum = _enum_names()
    twice = sorted({n for n in names if names.count(n) > 1})
    missing = sorted(set(enum) - set(names))
    extra = sorted(set(names) - set(enum))
    assert not (twice or missing or extra), (
        f"docs/errors.md table: missing {missing}, not in the enum {extra}, listed twice {twice}"
    )
    proto = _proto_statuses()
    wrong_number = sorted(n for n, number, _ in rows if enum[n] != number)
    wrong_status = sorted(n for n, _, statuses in rows if statuses != proto[n])
    assert not wrong_number, f"docs/errors.md numbers differ from the enum for {wrong_number}"
    assert not wrong_status, f"docs/errors.md status codes differ from the enum's comment for {wrong_status}"


def test_the_wire_reason_is_the_enum_value_name_in_domain_agentrt_dev():
    status = to_rpc_status(MeshError(Status.NOT_FOUND, Reason.RUN_NOT_FOUND, "no such run"))
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == ERROR_DOMAIN == "agentrt.dev"
    assert error_reason_pb2.ErrorReason.Value(info.reason) == error_reason_pb2.RUN_NOT_FOUND
