"""Deleting a session removes its task tree (004 §2.13 "Deleting a session").

The session store deletes a session with the hidden sessions serving it, at any depth,
and calls no peer; the task manager learns of the deletion itself (decision 0007):

- every parent incarnation with tasks is checked against the session store once per
  `parent_check_seconds` (replicas split the work through `task_parents.checked_us`);
- a by-session read (ListTasks, WatchTasks) compares the generation answering to the id
  NOW with the generations that have tasks, and removes the dead incarnations' trees;
- a delivery whose parent answers "no such session" removes the tree at once.

Only an answer counts: NOT_FOUND (SESSION_NOT_FOUND or STALE_GENERATION) removes a tree;
a failure to look (the store unreachable) removes nothing. Removing a tree deletes the
task rows in both roles at every depth (one transaction), then cancels the runs of the
tasks that were live and deletes their hidden sessions (which the session store's cascade
has normally done already; this covers a hidden session created just as its parent was
recreated).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from agentrt.core.errors import MeshError
from agentrt.tasks.background import run_passes, stop_passes
from agentrt.tasks.lifecycle.attempts import Attempts
from agentrt.tasks.lifecycle.launch import Deps, spawn_background
from agentrt.tasks.peers import is_gone

log = logging.getLogger("agentrt.tasks")


class Trees:
    """Finds deleted parents and removes their task trees (see the module docstring)."""

    def __init__(self, deps: Deps, attempts: Attempts) -> None:
        """Check through deps; stop following removed tasks in attempts."""
        self.deps = deps
        self.attempts = attempts
        self._loop: asyncio.Task[None] | None = None

    async def check(self, tenant: str, parent: str, generation: int) -> bool:
        """Ask the session store whether the parent incarnation lives; remove its tree if not.

        Returns:
            True when the tree was removed.
        """
        try:
            await self.deps.peers.get_session(tenant, parent, generation)
        except MeshError as err:
            if is_gone(err):
                await self.remove(tenant, parent, generation)
                return True
        return False

    async def remove(self, tenant: str, parent: str, generation: int) -> int:
        """Remove the tree of one parent incarnation; return how many tasks it held."""
        removed = await self.deps.upkeep.remove_tree(tenant, parent, generation)
        if not removed:
            return 0
        log.info("session %s (generation %d) is gone: removed %d task(s)", parent, generation, len(removed))
        self.deps.hub.changed()
        launcher = self.attempts.launcher
        for task in removed:
            self.attempts.forget(task.tenant, task.task_id)
            if task.live and task.run_id:
                await launcher.cancel_quietly(task.tenant, task.run_id, "its parent session was deleted")
            if task.session_id:
                with contextlib.suppress(MeshError):
                    await self.deps.peers.delete_session(
                        task.tenant, task.session_id, task.session_generation
                    )
        return len(removed)

    def stale(self, tenant: str, parent: str, current_generation: int) -> None:
        """Remove, in the background, the trees of parent's incarnations other than the current one."""

        async def sweep() -> None:
            for generation in await self.deps.upkeep.parent_generations(tenant, parent):
                if generation != current_generation:
                    await self.remove(tenant, parent, generation)

        spawn_background(sweep(), f"stale-{parent}")

    async def pass_once(self) -> int:
        """Check the parents due for a check; return how many trees were removed."""
        cfg = self.deps.config
        due = await self.deps.upkeep.due_parents(time.time(), cfg.parent_check_seconds, 100)
        removed = 0
        for tenant, parent, generation in due:
            removed += await self.check(tenant, parent, generation)
        return removed

    def start(self) -> None:
        """Check parents in the background, a few times per check period."""
        period = max(self.deps.config.parent_check_seconds / 4, 0.05)
        self._loop = run_passes(
            "agentrt-tasks-parents", "parent check", self.pass_once, lambda: asyncio.sleep(period)
        )

    async def stop(self) -> None:
        """Stop the background checks."""
        await stop_passes(self._loop)
