"""Persistent named shells for exec_command (004 §2.7k).

Owns the pool (`pool.Shells`: keyed by tenant, sandbox or workspace and session id; bounded;
idle shells closed; closing is final), the bash protocol spoken on one shell
(`session.Shell`: the sentinel split in two halves, exact echo stripping, bounded capture)
and its transport (`terminal`: an isolated bash on a PTY, launched like a one-shot
command of `tools.sandbox`).
"""
