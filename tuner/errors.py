"""User-facing errors: the CLI prints them as one line and exits non-zero, without a traceback."""

# Exit codes besides 0 and 2 (bad input): a run that went through but found nothing usable.
EXIT_ALL_FAILED = 3  # every trial of the study failed
EXIT_NONE_FEASIBLE = 4  # trials completed, none meets the requirement


class UserError(Exception):
    """A mistake the user can fix (bad file, bad flag, bad field). The message says what and how."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what Slurm, `timeout` and systemd send), raised where Ctrl-C's KeyboardInterrupt would be:
    the running trial fails with its reason, the study stays consistent, and the CLI exits 143."""
