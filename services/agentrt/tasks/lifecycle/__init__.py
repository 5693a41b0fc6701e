"""A task's life: launching and following its runs, stopping it, removing its tree."""
