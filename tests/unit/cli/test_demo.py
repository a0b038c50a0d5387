"""The demo: what `tuner demo` writes (DEMO_DIR) stays out of the repository."""
import os

from tuner.store.storage import DEMO_DIR

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def test_the_demo_folder_is_not_committed():
    assert f"{DEMO_DIR}/" in open(os.path.join(ROOT, ".gitignore")).read().split()
