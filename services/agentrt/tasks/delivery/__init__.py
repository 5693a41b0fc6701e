"""Delivering a task's ending to its parent session (notifications) and waking the parent."""
