"""The problem a study tunes: model, validation and calibration data, space, accuracy requirement.

Loading validates every user input before anything is written (bad files, shapes, space fields,
requirements and backends get one line each). Nothing here builds or times an engine.
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import UserError
from ..inputs import data as data_mod
from ..inputs.configs import defaults_chooser, normalize, parse_set, trial_params
from ..inputs.model import (
    ModelFile,
    TensorSpec,
    check_shapes_match_data,
    default_opset,
    input_specs,
    load_model,
    output_specs,
    resolve_shapes,
)
from ..inputs.model import model_hash as hash_model
from ..inputs.ref_outputs import load_ref_outputs
from ..inputs.space import BACKEND, Space, load_space
from ..inputs.workload import ShapeSet, cut_batches, parse_workload, set_label, weights
from ..measure.requirement import Requirement
from .space_backends import check_backends, check_opset


@dataclass
class ProblemSpec:
    """What defines a problem, as given by the user: JSON-able, stored in a study, sent to child processes. What a
    call gives (tuner.run.options.TuneOptions.problem) is one too, a field left None where it was not given: on
    resume the stored one holds."""

    model_path: str | None = None
    space_path: str | None = None
    data: str | None = None
    calib_data: str | None = None
    shapes: list[str] | None = None
    int_ranges: list[str] | None = None
    require: str | None = None
    n_batches: int = 4
    n_calib: int = 4
    # The model's hash as the process that validated it computed it: a child process given a loaded
    # problem's spec trusts it, and skips the ONNX checker and hashing the model again (None: validate).
    model_hash: str | None = None
    # Reference outputs from the training framework (.npz), compared to instead of ONNX Runtime's fp32 run.
    ref_outputs: str | None = None
    # Requests in flight at once while an engine is timed (--throughput): 1 (or None: a study made before it) times
    # one request at a time, the latency; more time the throughput, each engine serving them with its runtime's
    # own parallelism (tuner.backends.base.ServesConcurrently).
    in_flight: int | None = None

    def load(self, requirement: Requirement | None = None) -> Problem:
        """Load and validate; requirement: `require` already parsed (by the study's settings)."""
        return load_problem(**asdict(self), requirement=requirement)


@dataclass(frozen=True)
class LoadedSpec:
    """A problem as the process that validated it hands it to its children (trial children, the jobs of
    selection, export and verify): the spec with the model's hash, the requirement parsed and the space checked
    against this machine's backends. A child given one parses, hashes and checks none of them again."""

    spec: ProblemSpec
    requirement: Requirement
    space: Space

    def load(self) -> Problem:
        return load_problem(**asdict(self.spec), requirement=self.requirement, space=self.space)


@dataclass
class ShapeCase:
    """One set of the workload's shapes: every input's shape, its share of the requests (the weights sum to 1),
    its validation batches, and their reference outputs (filled in by the evaluator)."""

    shapes: dict[str, tuple[int, ...]]
    weight: float
    batches: list
    refs: list | None = None

    @property
    def label(self) -> str:
        return set_label(self.shapes)


@dataclass
class Problem:
    """Everything fixed across trials. `cases`: the workload, one per set of shapes (one without weights);
    `batches`, `shapes` and `refs` are the first's (what one-shape code reads)."""

    spec: ProblemSpec
    model: ModelFile
    space: Space
    cases: list[ShapeCase]
    calib: list
    data_hash: str
    requirement: Requirement
    notes: list[str] = field(default_factory=list)  # things the user should know, said once

    @property
    def batches(self) -> list:
        return self.cases[0].batches

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return self.cases[0].shapes

    @property
    def refs(self) -> list | None:
        return self.cases[0].refs

    @refs.setter
    def refs(self, value: list | None) -> None:
        self.cases[0].refs = value

    @property
    def several_shapes(self) -> bool:
        return len(self.cases) > 1

    @property
    def loaded(self) -> LoadedSpec:
        """What a child process needs to load this problem again without checking it again."""
        return LoadedSpec(self.spec, self.requirement, self.space)

    @property
    def model_path(self) -> str:
        return self.model.path

    @property
    def model_hash(self) -> str:
        return self.model.hash

    def backend_name(self, config: dict) -> str:
        """The backend that builds `config`: its `backend` choice in a space over several, else the space's."""
        return config.get(BACKEND) or self.space.backends[0]

    @property
    def graph_nodes(self) -> list[tuple[str, str]]:
        return self.model.nodes

    @property
    def calib_key(self) -> str:
        """Names the cached calibration ranges. The model is part of it: two models fed the same
        inputs (ResNet-18 and MobileNetV3 at 1x3x224x224) have different tensors to range."""
        return f"{self.model_hash}-{self.data_hash}"


def load_problem(model_path: str, space_path: str | None = None, data: str | None = None, calib_data: str | None = None,
                 shapes: list[str] | None = None, int_ranges: list[str] | None = None, require: Any = None,
                 n_batches: int = 4, n_calib: int = 4, model_hash: str | None = None,
                 requirement: Requirement | None = None, ref_outputs: str | None = None,
                 in_flight: int | None = None, space: Space | None = None) -> Problem:
    """model_hash: trusted (ProblemSpec.model_hash); requirement: `require` already parsed; ref_outputs: an
    .npz of the reference outputs of --data's batches (tuner.inputs.ref_outputs), else ONNX Runtime's fp32 run's."""
    requirement = Requirement.parse(require) if requirement is None else requirement
    sets = parse_workload(shapes)
    in_flight = check_in_flight(in_flight)
    if space is None:
        space, notes = check_backends(load_space(space_path), several_shapes=len(sets) > 1, throughput=in_flight > 1)
    else:  # checked by the parent (LoadedSpec): its notes were said there
        notes = []
    proto = load_model(model_path, check=model_hash is None)
    if model_hash is None:  # the parent's check (a trial child trusts it)
        check_opset(model_path, default_opset(proto), space, reference=not ref_outputs)
    model_hash = model_hash or hash_model(model_path)
    spec = ProblemSpec(model_path, space_path, data, calib_data, shapes, int_ranges, str(requirement) or None,
                       n_batches, n_calib, model_hash, ref_outputs, in_flight if in_flight > 1 else None)
    if ref_outputs and not data:
        raise UserError(f"--ref-outputs {ref_outputs}: needs --data, the inputs the reference outputs were computed "
                        "from (synthetic inputs have no outputs from the training framework)")
    if ref_outputs and len(sets) > 1:
        raise UserError(f"--ref-outputs {ref_outputs}: holds the outputs of --data's batches at one shape, and the "
                        "workload has several; give one --shape set, or leave --ref-outputs out (ONNX Runtime's fp32 "
                        "outputs are the reference at every shape)")
    specs = input_specs(proto)
    ranges = data_mod.check_int_ranges(data_mod.parse_int_ranges(int_ranges), specs)
    cases = _cases(sets or [ShapeSet({})], specs, data, n_batches, ranges)
    calib = data_mod.load_npz_batches(calib_data, specs) if calib_data else cases[0].batches[:n_calib]
    data_hash = _data_hash(cases, calib)
    if ref_outputs:  # the reference is part of the data: a changed file is other data (search.settings.check_data)
        cases[0].refs = load_ref_outputs(ref_outputs, output_specs(proto), specs, cases[0].shapes, len(cases[0].batches))
        data_hash = data_mod.with_refs(data_hash, cases[0].refs)
    notes += problem_notes(requirement, data, specs, ranges)
    if in_flight > 1:
        notes.append(f"--throughput: each engine is timed with {in_flight} requests in flight at once, so a speedup is "
                     "a gain in requests per second; the analysis's quick timings are still one request at a time")
    return Problem(spec, ModelFile(model_path, proto, model_hash), space, cases, calib, data_hash, requirement, notes)


def check_in_flight(in_flight: int | None) -> int:
    """The requests in flight (1 for None); a whole number from 1 up, else one line."""
    if in_flight is None:
        return 1
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise UserError(f"--throughput {in_flight!r}: give the number of requests in flight at once, a whole number "
                        "from 2 up (e.g. the machine's cores), or leave it out to measure latency")
    return in_flight


def _cases(sets: list[ShapeSet], specs: list[TensorSpec], data: str | None, n_batches: int,
           ranges: dict[str, tuple[int, int]]) -> list[ShapeCase]:
    """Each set's batches: the data's (cut to the set's shapes where the workload has several), else synthetic."""
    shares = weights(sets)
    cases = []
    loaded = data_mod.load_npz_batches(data, specs) if data else None
    for s, share in zip(sets, shares):
        if loaded is None:
            concrete = resolve_shapes(specs, s.shapes)
            batches = data_mod.synthetic_batches(specs, concrete, n_batches, ranges)
        elif len(sets) == 1:
            check_shapes_match_data(s.shapes, {k: tuple(v.shape) for k, v in loaded[0].items()}, data)
            batches = loaded
        else:
            resolve_shapes(specs, {k: tuple(v.shape) for k, v in loaded[0].items()} | s.shapes)  # names and fit
            batches = cut_batches(loaded, s.shapes, data)
        cases.append(ShapeCase({k: tuple(v.shape) for k, v in batches[0].items()}, share, batches))
    return cases


def _data_hash(cases: list[ShapeCase], calib: list) -> str:
    """The data's hash: the batches (every set's, and the weights, where the workload has several) and the
    calibration batches'. One set hashes as before workloads, so older studies resume."""
    if len(cases) == 1:
        main = data_mod.batches_hash(cases[0].batches)
    else:
        main = data_mod.batches_hash([b for c in cases for b in c.batches] + [{"weight": np.array(c.weight)} for c in cases])
    return main + data_mod.batches_hash(calib)[:8]


def problem_notes(requirement: Requirement, data: str | None, specs: list[TensorSpec],
                  ranges: dict[str, tuple[int, int]]) -> list[str]:
    """What makes a study's results mean less than they seem, said once by every command that loads it."""
    notes = []
    if not requirement.bounds:
        notes.append("no --require: every trial counts as feasible, so the winner is just the fastest engine "
                     "whatever its error (add e.g. --require 'cos<=0.005')")
    if not data:
        kinds = []
        for s in specs:
            if np.issubdtype(s.dtype, np.floating):
                kinds.append(f"{s.name}: standard normal")
            elif s.dtype == np.bool_:
                kinds.append(f"{s.name}: random booleans")
            elif s.name in ranges:
                kinds.append(f"{s.name}: uniform integers in [{ranges[s.name][0]}, {ranges[s.name][1]}) from --int-range")
        notes.append(f"no --data: accuracy is measured on synthetic inputs ({'; '.join(kinds)}), which says little "
                     "about a real task; give real inputs with --data FILE.npz")
    return notes


def print_notes(notes: list[str]) -> None:
    """The problem's notes, as every command says them: once, on stderr."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def config_from_sets(problem: Problem, sets: list[str] | None) -> dict:
    """The config of `--set key=value ...`, every other parameter at its default. A value for a
    parameter whose condition does not hold (ov_precision without backend=openvino) is refused."""
    values = parse_set(sets, problem.space)
    asked = trial_params(problem.space, defaults_chooser(values), problem.graph_nodes)
    for name in values:
        p = problem.space.param(name)
        if p is not None and name not in asked:
            raise UserError(f"--set {name}: inactive here, it applies when {p.when}; set those too")
    return normalize(problem.space, defaults_chooser(values), problem.graph_nodes)
