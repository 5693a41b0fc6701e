"""Agent specs: registry and snapshots (`agents`), validation, output schemas, admission.

What a run may be started with is decided here, before anything is stored (004 §2.3a).
"""
