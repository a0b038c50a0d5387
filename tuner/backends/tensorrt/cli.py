"""The parser of `tuner routes`, the command the TensorRT backend brings. Imports nothing: the CLI builds it
with the others at start-up; the command's module (.command, TensorRT with it) loads only when it runs."""


def add_routes_parser(sub) -> None:
    """`tuner routes`: the parser (tuner.cli.main builds it with the others); the work is .command.cmd_routes."""
    p = sub.add_parser(
        "routes", help="print TensorRT's build-route knob database (11.1+), like trtexec --helpBuildRoute",
        description="Print the Global Performance Tuner's knob database of the installed TensorRT "
                    "(IBuilderConfig.all_build_routes, TensorRT 11.1+; needs the GPU), or of a saved JSON file: "
                    "as a table, as JSON, as space-file lines, or checked against a space file's route/ parameters.")
    p.add_argument("model", nargs="?", help="the model (optional: the database belongs to the installed TensorRT "
                                            "and GPU, and is the same for every model)")
    p.add_argument("--knob", help="one knob, with or without its leading dash (default: every knob)")
    p.add_argument("--json", action="store_true",
                   help="print the JSON as IBuilderConfig.all_build_routes returns it (default: a table)")
    p.add_argument("--yaml", nargs="*", metavar="KNOB",
                   help="space-file parameters for these knobs (default when none named: all)")
    p.add_argument("--space", help="check a space file's route/ parameters against the database (default: no check)")
    p.add_argument("--from-file", metavar="JSON",
                   help="read a saved database (tuner routes --json > FILE) instead of TensorRT "
                        "(default: ask the installed TensorRT)")
    p.set_defaults(run="tuner.backends.tensorrt.command:cmd_routes")  # loaded when it runs
