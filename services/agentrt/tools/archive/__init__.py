"""Workspace archives: UploadWorkspace / DownloadWorkspace.

Owns resolving a transfer's target and moving chunks between the event loop and the tar
workers (`transfer.WorkspaceArchives`), and the blocking tar work itself (`tar`: unpack
member by member through descriptor walks, nothing ever written outside the workspace;
pack without following a symlink). Bounds and refusals: docs/services/tools.md
"Workspace archives".
"""
