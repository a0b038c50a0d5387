"""The route a per-layer analysis quantizes with (the sensitivity ranking, the route variants, `tuner
sensitivity`): its override, its config as the study's trials would build it, its backend, and the fp32
engine its quick latencies compare with."""
from __future__ import annotations

from ..backends.base import get_backend
from ..errors import UserError
from ..inputs.configs import defaults_chooser, layer_candidates, normalize, route_choice, trial_params
from ..inputs.space import BACKEND, ROUTE_KEY, LayerOverride
from ..problem.spec import Problem


def quantizing_override(problem: Problem, route: str, backend: str | None = None) -> LayerOverride:
    """The per-layer override that applies to `route` (of `backend`, in a space over several), or a
    plain refusal."""
    space = problem.space
    mine = [o for o in space.overrides if backend is None or backend in space.backends_of(o.when)]
    for o in mine:
        if route in space.route_param(o)[1]:
            if not layer_candidates(o, problem.graph_nodes):
                break
            return o
    routes = sorted({r for o in mine for r in space.route_param(o)[1]})
    raise UserError(f"route {route} has no per-layer candidates in this model and space"
                    f"{f' for backend {backend}' if backend else ''}; per-layer choices exist for: "
                    f"{', '.join(routes) or 'no route'}")


def route_setup(problem: Problem, route: str | None, backend: str | None, values: dict,
                options: dict | None = None) -> tuple[dict, dict]:
    """(config, parameter values by name) of the route a sensitivity analysis quantizes with: route, its
    options (config keys) and, in a space over several backends, the backend. Without a route, the
    backend's first quantizing route. The options are the space's defaults, as the study's trials build
    them, with the --set `values` (by parameter name) and then `options` (by config key: a route variant,
    tuner.analysis.variants) chosen where the space offers them."""
    space = problem.space
    if backend is not None and backend not in space.backends:
        raise UserError(f"--backend {backend}: not a backend of the space {space.path} "
                        f"({', '.join(space.backends)}); give a space with it, e.g. --space cpu.yaml")
    if backend is None:  # the backend whose routes have `route`
        backend = next((b for b in space.backends if route is None or route in get_backend(b).routes), space.backends[0])
    route = route or get_backend(backend).quantizing_routes[0]
    route_name = next((p.name for p in space.params
                       if p.key == ROUTE_KEY and route in (p.choices or []) and backend in space.backends_of(p.when)), None)
    chosen = ({route_name: route} if route_name else {}) | ({BACKEND: backend} if len(space.backends) > 1 else {})
    choose = defaults_chooser(values | chosen, options)
    full = normalize(space, choose, problem.graph_nodes)
    # the route, its options and whatever `options` set besides (a setting for the float parts, e.g. bf16)
    config = route_choice(space, full) | {k: full[k] for k in options or {} if k in full}
    return config | {ROUTE_KEY: route} | space.keys(values), trial_params(space, choose, problem.graph_nodes)


def route_config(problem: Problem, route: str | None, backend: str | None, values: dict) -> dict:
    """The config a sensitivity analysis quantizes with (route_setup): the space's defaults with --set values."""
    return route_setup(problem, route, backend, values)[0]


def fp32_config(route_config: dict) -> dict:
    """The float engine a route's quick latencies compare with: the backend's fp32 route as it comes."""
    return {k: v for k, v in route_config.items() if k == BACKEND} | {ROUTE_KEY: "fp32"}
