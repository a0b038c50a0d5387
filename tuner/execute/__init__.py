"""One candidate at a time: built, checked and timed in an isolated child process (jobs), never in the caller."""
