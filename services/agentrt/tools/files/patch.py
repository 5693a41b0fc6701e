"""apply_patch: add, delete, update and move files with hunks located by whole lines (004 §2.7s).

Patch format (the one coding models are trained on):

    *** Begin Patch
    *** Add File: path          lines follow, each starting with "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path       optional, right after Update File
    @@ optional anchor line     starts a hunk; " " context, "-" removed, "+" added lines
    *** End of File             optional: the hunk ends at the end of the file
    *** End Patch

Invariants:
- A hunk's context and removed lines match WHOLE lines (a match starts at the start of a
  line and ends at the end of one), so `x = 1` never binds inside `max = 10`. The first
  match at or after the previous hunk's end is edited. Trailing whitespace is forgiven
  only when no exact match exists.
- An @@ anchor is the text after "@@ " exactly as written, indentation included, and
  binds the same way: the first line at or after the previous hunk that equals it (trailing
  whitespace forgiven) is taken. Only when no line does, a line whose stripped text equals
  the stripped anchor is taken, and only when exactly one such line exists: with several
  the patch fails naming them (an indented anchor never lands on a lookalike elsewhere).
- The file must be UTF-8 text: a hunk never rewrites bytes it could not read.
- All or nothing: every section is computed in memory first; a hunk that does not match
  fails the whole patch and no file is touched.
- `*** Move to:` naming the section's own path is a plain update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrt.tools.calls import args as A
from agentrt.tools.calls.args import ArgError
from agentrt.tools.calls.results import Outcome
from agentrt.tools.files.ops import delete_file, exists, read_bytes, write_bytes
from agentrt.tools.files.paths import Workspace

MAX_FILE_BYTES = 10 * 1024 * 1024


class PatchError(ArgError):
    """A patch that cannot be applied; `str()` tells the model which part and why."""


@dataclass
class Hunk:
    """One @@ hunk: an optional anchor, the lines it expects, and the lines it leaves."""

    anchor: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    at_end: bool = False


@dataclass
class Section:
    """One file operation of a patch."""

    op: str  # "add" | "delete" | "update"
    path: str
    move_to: str | None = None
    added: list[str] = field(default_factory=list)
    hunks: list[Hunk] = field(default_factory=list)


def parse(text: str) -> list[Section]:
    """Parse patch text into sections.

    Raises:
        PatchError: the text is not a well-formed patch.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[0].strip() != "*** Begin Patch":
        raise PatchError('The patch must start with "*** Begin Patch".')
    if lines[-1].strip() != "*** End Patch":
        raise PatchError('The patch must end with "*** End Patch".')
    sections: list[Section] = []
    current: Section | None = None
    for number, line in enumerate(lines[1:-1], start=2):
        if line.startswith("*** Add File: "):
            current = Section("add", line[len("*** Add File: ") :].strip())
            sections.append(current)
        elif line.startswith("*** Delete File: "):
            current = Section("delete", line[len("*** Delete File: ") :].strip())
            sections.append(current)
        elif line.startswith("*** Update File: "):
            current = Section("update", line[len("*** Update File: ") :].strip())
            sections.append(current)
        elif line.startswith("*** Move to: "):
            if current is None or current.op != "update" or current.hunks or current.move_to:
                raise PatchError(f"line {number}: *** Move to: must follow *** Update File: directly.")
            current.move_to = line[len("*** Move to: ") :].strip()
        elif line.strip() == "*** End of File":
            if current is None or current.op != "update" or not current.hunks:
                raise PatchError(f"line {number}: *** End of File outside a hunk.")
            current.hunks[-1].at_end = True
        elif current is None:
            raise PatchError(f"line {number}: expected *** Add File:, *** Update File: or *** Delete File:.")
        elif current.op == "add":
            if not line.startswith("+"):
                raise PatchError(f"line {number}: every line of an added file starts with '+'.")
            current.added.append(line[1:])
        elif current.op == "delete":
            raise PatchError(f"line {number}: *** Delete File: takes no lines.")
        elif line.startswith("@@"):
            # "@@ anchor": one space separates; the rest is the anchor line as written.
            anchor = line[3:] if line.startswith("@@ ") else line[2:]
            current.hunks.append(Hunk(anchor if anchor.strip() else None))
        else:
            if not current.hunks:
                current.hunks.append(Hunk(None))
            hunk = current.hunks[-1]
            tag, body = (line[:1], line[1:]) if line else (" ", "")
            if tag == " ":
                hunk.old.append(body)
                hunk.new.append(body)
            elif tag == "-":
                hunk.old.append(body)
            elif tag == "+":
                hunk.new.append(body)
            else:
                raise PatchError(f"line {number}: hunk lines start with ' ', '-' or '+', not {line[:20]!r}.")
    if not sections:
        raise PatchError("The patch changes no file.")
    for section in sections:
        if section.op == "update" and not section.hunks and not section.move_to:
            raise PatchError(f"*** Update File: {section.path} has no hunk.")
        if not section.path:
            raise PatchError("A section names no path.")
    return sections


def _find(lines: list[str], wanted: list[str], start: int, at_end: bool) -> int:
    """Index of the first whole-line match of wanted at or after start, or -1."""
    last = len(lines) - len(wanted)
    candidates = [last] if at_end else range(start, last + 1)
    for equal in (lambda a, b: a == b, lambda a, b: a.rstrip() == b.rstrip()):
        for i in candidates:
            if i >= start and all(equal(lines[i + k], wanted[k]) for k in range(len(wanted))):
                return i
    return -1


def _find_anchor(lines: list[str], anchor: str, start: int, path: str, number: int) -> int:
    """Index of the line the @@ anchor binds to at or after start (see the module docstring).

    Raises:
        PatchError: no line matches, or only stripped lookalikes and more than one of them.
    """
    exact = anchor.rstrip()
    for i in range(start, len(lines)):
        if lines[i].rstrip() == exact:
            return i
    trimmed = anchor.strip()
    near = [i for i in range(start, len(lines)) if lines[i].strip() == trimmed]
    if len(near) == 1:
        return near[0]
    if not near:
        raise PatchError(f"{path}: hunk {number}: no line matches the @@ anchor {anchor!r}.")
    shown = ", ".join(str(i + 1) for i in near[:10]) + (", ..." if len(near) > 10 else "")
    raise PatchError(
        f"{path}: hunk {number}: no line equals the @@ anchor {anchor!r}, and lines {shown} all "
        "match it once indentation is ignored. Nothing was changed; resend the patch with the "
        "anchor exactly as the file has it (its indentation included)."
    )


def apply_hunks(text: str, hunks: list[Hunk], path: str) -> str:
    """Return text with hunks applied in order.

    Raises:
        PatchError: a hunk's anchor or context does not match.
    """
    trailing_newline = text.endswith("\n") or not text
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        if hunk.anchor is not None:
            cursor = _find_anchor(lines, hunk.anchor, cursor, path, number) + 1
        if not hunk.old:
            index = len(lines) if (hunk.at_end or hunk.anchor is None) else cursor
        else:
            index = _find(lines, hunk.old, cursor, hunk.at_end)
            if index < 0:
                first = hunk.old[0]
                raise PatchError(
                    f"{path}: hunk {number}: its context/removed lines (starting {first!r}) do not "
                    "match whole lines of the file after the previous hunk. Read the file and resend."
                )
        lines[index : index + len(hunk.old)] = hunk.new
        cursor = index + len(hunk.new)
    return "\n".join(lines) + ("\n" if trailing_newline and lines else "")


def apply_patch(ws: Workspace, args: dict[str, Any]) -> Outcome:
    """Apply a patch inside ws, all or nothing (see the module docstring).

    Args:
        ws: the workspace.
        args: {"patch": string}.

    Raises:
        ArgError: (PatchError) a malformed patch or a hunk that does not match.
        PathRefused: a path escapes the workspace or names no regular file.
    """
    sections = parse(A.required_str(args, "patch"))
    seen: set[str] = set()
    writes: list[tuple[str, bytes]] = []
    deletes: list[str] = []
    report: list[str] = []
    for section in sections:
        target = section.move_to if section.move_to and section.move_to != section.path else None
        for path in filter(None, (section.path, target)):
            if path in seen:
                raise PatchError(f"{path} appears in more than one section.")
            seen.add(path)
        if section.op == "add":
            if exists(ws, section.path):
                raise PatchError(f"{section.path} already exists; use *** Update File:.")
            writes.append((section.path, ("\n".join(section.added) + "\n").encode()))
            report.append(f"A {section.path}")
        elif section.op == "delete":
            read_bytes(ws, section.path, MAX_FILE_BYTES)
            deletes.append(section.path)
            report.append(f"D {section.path}")
        else:
            _, data = read_bytes(ws, section.path, MAX_FILE_BYTES)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PatchError(
                    f"{section.path} is not UTF-8 text (byte {exc.start}); apply_patch edits text "
                    "files only. Nothing was changed."
                ) from None
            new = apply_hunks(text, section.hunks, section.path)
            writes.append((target or section.path, new.encode()))
            if target:
                deletes.append(section.path)
                report.append(f"R {section.path} -> {target}")
            else:
                report.append(f"M {section.path}")
    for path, data in writes:
        write_bytes(ws, path, data)
    for path in deletes:
        delete_file(ws, path)
    return Outcome(
        content="Applied the patch:\n" + "\n".join(report),
        summary=f"patched {len(sections)} file(s)",
        details={"files": report},
    )
