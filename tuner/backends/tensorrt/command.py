"""`tuner routes`, the command the TensorRT backend brings (its parser: .cli): the Global Performance
Tuner's knob database (TensorRT 11.1+) as a table, JSON or space-file lines, or checked against a space."""
from __future__ import annotations

from ...errors import UserError
from ...inputs.space import load_space
from ...inputs.user_paths import check_input_file
from .backend import TensorRTBackend
from .routes import check_space_routes, format_json, format_table, format_yaml, parse_knob_database, space_parameters


def _knob_database_text(from_file: str | None) -> str:
    """The knob database JSON: a saved file, or the installed TensorRT's (one line when there is none)."""
    if from_file:
        try:
            with open(from_file) as f:
                return f.read()
        except OSError as exc:
            raise UserError(f"{from_file}: {exc.strerror}; pass a JSON file saved with `tuner routes --json > FILE`") from None
    backend = TensorRTBackend()  # one line naming what to install when TensorRT or the GPU is missing
    text = backend.knob_database_json()
    if not text:
        raise UserError(f"TensorRT {backend.trt.__version__} has no build routes here: they need TensorRT 11.1+ "
                        "with the Global Performance Tuner (not in TensorRT-RTX or on Windows)")
    return text


def cmd_routes(args) -> int:
    if args.model:
        check_input_file(args.model, "model", "pass the path of an .onnx file")
    text = _knob_database_text(args.from_file)
    try:
        if args.json:
            print(format_json(text, args.knob))
            return 0
        db = parse_knob_database(text)
        if args.space:
            print(f"route/ parameters of {args.space} against the knob database (tuner {db.tuner_version}):")
            for line in check_space_routes(load_space(args.space).params, db):
                print(f"  {line}")
        elif args.yaml is not None:
            params, skipped = space_parameters(db, args.yaml or None)
            print(format_yaml(params, db) + "".join(f"\n  # skipped {line}" for line in skipped))
        else:
            print(format_table(db, args.knob))
    except ValueError as exc:
        raise UserError(f"{args.from_file or 'all_build_routes'}: {exc}") from None
    return 0
