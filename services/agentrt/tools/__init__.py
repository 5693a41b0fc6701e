"""The tool execution service (ToolService, seed 004 §2.7, §2.7b–c, §2.7g, §2.7j–s).

Rooms: `config` (environment), `server` (process), `servicer` (proto <-> domain).
Packages: `calls` (what a call is: the catalog, argument decoding, outcomes, bounded
output), `execution` (one call, exactly once, through the journal: request checks,
journal answers and cancels, calls outliving their caller, dispatch to the tools; spans;
the task tools), `files` (the in-process file tools, apply_patch, workspace confinement),
`storage` (journal and sandbox tables, their store, Alembic migrations), `sandbox`
(sandbox lifecycle, workspaces, the local bubblewrap backend), `docker` (the docker
backend), `shell` (persistent named shells), `archive` (workspace upload and download).
See docs/services/tools.md.
"""
