"""A run's life across requests and replicas, beside the manager (runs/manager.py).

Owns what happens to a run outside its executor: `control.RunControl` (resume, cancel,
inject, stop after the turn: each one guarded write; mixed into `RunManager`),
`child_runs.ChildRuns` (agents as tools across requests: answers routed to the child that
waits, the parent woken, cancels flowing down), `lease_keeper.LeaseKeeper` (lease renewal
from a task of its own), `drain.RunDrain` (SIGTERM: the local runs stopped and handed over
within the drain; mixed into `RunManager`) and `sandboxes` (a run's sandbox: which one, created through the
tool service, released when the run ends).
"""
