"""The task manager's storage: its tables, their compare-and-set transitions, their migrations."""
