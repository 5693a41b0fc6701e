"""Wire-level emulators of the model providers, for tests (issue 2 item 6)."""
