"""The embedded job store (SQLite under TORCHJOB_HOME: jobs, replica attempts, events) and the rule
that the runtime's own files are the user's alone (`files`)."""
