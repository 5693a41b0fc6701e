"""The in-process file tools and the confinement every path of a workspace goes through.

Owns workspaces and path confinement (`paths`: `Workspace`, `open_workspace`, `resolve`,
`PathRefused`; no file tool reaches outside its workspace, symlinks included), read_file,
write_file and list_files (`ops`, no process spawned) and apply_patch (`patch`, 004 §2.7s).
The functions are synchronous; the executor runs them on a worker thread.
"""
