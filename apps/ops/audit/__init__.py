"""The state audit: find in-process state in the project's code, and check its classification."""
