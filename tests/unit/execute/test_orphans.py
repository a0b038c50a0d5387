"""tuner.execute.orphans: a child ends when its parent dies, by the kernel's parent-death signal (Linux) or by
the polling thread (elsewhere), and at once when the parent died before it asked."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

# The child: ends with its parent (WATCH: the kernel or the polling thread), says its pid, then waits.
CHILD = """
import os, sys, time
from tuner.execute import orphans
if sys.argv[1] == "thread":
    orphans._kernel_kills_with_parent = lambda: False
else:
    assert orphans._kernel_kills_with_parent()
orphans.end_with_parent(int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid())
print(os.getpid(), flush=True)
time.sleep(60)
"""
# The parent: starts the child, passes its pid on, then waits to be killed.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""
WAYS = ["kernel", "thread"] if sys.platform.startswith("linux") else ["thread"]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("way", WAYS)
def test_a_child_ends_when_its_parent_is_killed(way):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, way], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.kill()
        parent.wait()
        end = time.monotonic() + 5  # the thread looks once a second
        while not _gone(child) and time.monotonic() < end:
            time.sleep(0.05)
        assert _gone(child)
    finally:
        parent.kill()
        parent.wait()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("way", WAYS)
def test_a_child_whose_parent_died_before_it_asked_ends_at_once(way):
    # a parent pid that is not its parent's: as if the parent had died and the child been reparented
    r = subprocess.run([sys.executable, "-c", CHILD, way, str(os.getpid() + 10**6)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == -signal.SIGKILL and r.stdout == "", (r.returncode, r.stdout, r.stderr)
