"""The `tuner` command line run in this process, as a test reads it: (exit code, stdout, stderr)."""
from tuner.cli.main import main


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
