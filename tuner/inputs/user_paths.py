"""Checks of the paths a user names: files read (model, data, space) and places written (outputs, engines).
Each refusal is one UserError line that says what is wrong with the path and how to fix it."""
import os

from ..errors import UserError


def check_input_file(path: str, kind: str, hint: str) -> None:
    """The one check of a file the user names (model, data, space): missing and directory read differently."""
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory, not a {kind} file; {hint}")
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such {kind} file; {hint}")


def check_output_file(path: str, flag: str) -> None:
    """A file the command is to write: not a directory, in a folder that exists."""
    if os.path.isdir(path):
        raise UserError(f"{flag} {path}: is a directory; give a file path, e.g. {os.path.join(path, 'model.onnx')}")
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        raise UserError(f"{flag} {path}: the folder {parent} does not exist; create it first")


def check_output_dir(path: str, flag: str) -> None:
    """A folder the command writes into: new or a directory, never a file."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{flag} {path} is a file, not a folder; give a folder, e.g. {flag} {path}-dir")


def check_writable_dir(path: str, flag: str) -> None:
    """A folder the command will write into, made now (with parents) and tried with a file, so that a path
    under a file or on a read-only disk is refused before the study starts, not by every trial."""
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, ".write-test"), "w"):
            pass
        os.remove(os.path.join(path, ".write-test"))
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write there ({exc.strerror or exc}); give a folder you can write to") from None


def dir_bytes(path: str) -> int:
    """The bytes of every file under path (what a folder of engines takes on disk); 0 for a missing folder.
    What is not a file (a dangling link) counts nothing."""
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if os.path.isfile(os.path.join(root, f)))
    return total
