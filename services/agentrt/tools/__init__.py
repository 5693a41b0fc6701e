"""The tool execution service (ToolService, seed 004 §2.7, §2.7b–c, §2.7g, §2.7j–s).

Rooms: `config` (environment), `server` (process), `servicer` (proto <-> domain),
`execution` (one call, exactly once, through the journal), `catalog` (tool specs),
`args` (lenient argument decoding), `files` + `patch` (in-process file tools), `paths`
(workspace confinement), `output` (bounded capture), `results` (outcomes), `store` +
`models` (journal and sandbox tables). Packages: `sandbox` (sandbox lifecycle,
workspaces, the local bubblewrap backend), `docker` (the docker backend), `shell`
(persistent named shells), `archive` (workspace upload and download). See
docs/services/tools.md.
"""
