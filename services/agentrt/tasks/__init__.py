"""The task manager service (TaskService, seed 004 §2.13).

This release serves health and the contract; spawning tasks arrives with the task
issue. See docs/services/tasks.md.
"""
