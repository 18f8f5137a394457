"""optuna-dashboard over a study's storage, with its best trials the study's feasible front.

optuna-dashboard (0.21) shows as "Best Trials" the Pareto front of every COMPLETE trial (one
objective: the storage's best trial), constraints ignored: a design that breaks a constraint
is stored COMPLETE (the samplers read its constraint values to steer away), so the stock
dashboard lists infeasible trials as best while Optuna's own ``Study.best_trials`` and our
``pareto.csv`` do not. :func:`create_app` wraps the dashboard's WSGI application: its study
detail (``GET /api/studies/<id>``) answers with ``best_trials`` replaced by the feasible front
(Optuna's ``best_trials`` rule: every constraint value <= 0), one trial per design
(:func:`dse.study.pareto.first_of_each_design`), as ``pareto.csv`` lists it; everything else is
the dashboard's own. ``dse study dashboard DIR`` serves it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable

from dse.errors import BadInput

_DETAIL = re.compile(r"^/api/studies/(\d+)/?$")


def _dashboard():
    try:
        import optuna_dashboard._app as app
        import optuna_dashboard._serializer as serializer
    except ImportError:
        raise BadInput("dashboard", "optuna-dashboard", "the optuna-dashboard package: pip "
                       "install -c constraints.txt -e '.[dev]'") from None
    return app, serializer


def feasible_front(storage, study_id: int) -> list:
    """The study's best trials as ``Study.best_trials`` finds them (feasible and
    non-dominated), the first trial of each design."""
    from optuna.study._multi_objective import _get_pareto_front_trials_by_trials

    from dse.study.pareto import first_of_each_design
    from dse.study.progress import is_feasible
    trials = [t for t in storage.get_all_trials(study_id, deepcopy=False) if is_feasible(t)]
    directions = storage.get_study_directions(study_id)
    front = _get_pareto_front_trials_by_trials(first_of_each_design(trials), directions)
    return sorted(front, key=lambda t: t.number)


def create_app(storage_url: str) -> Callable:
    """A WSGI application: optuna-dashboard on ``storage_url`` whose study detail names the
    feasible front as its best trials (see the module docstring)."""
    import optuna
    app_module, serializer = _dashboard()
    storage = optuna.storages.get_storage(storage_url)
    inner = app_module.create_app(storage)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        m = _DETAIL.match(environ.get("PATH_INFO", ""))
        if m is None or environ.get("REQUEST_METHOD", "GET") != "GET":
            return inner(environ, start_response)
        captured: dict[str, Any] = {}

        def keep(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return lambda data: None
        body = b"".join(inner(environ, keep))
        if not captured["status"].startswith("200"):
            start_response(captured["status"], captured["headers"])
            return [body]
        detail = json.loads(body)
        study_id = int(m.group(1))
        attrs = storage.get_study_system_attrs(study_id)
        detail["best_trials"] = [serializer.serialize_frozen_trial(study_id, t, attrs)
                                 for t in feasible_front(storage, study_id)]
        out = json.dumps(detail).encode()
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        start_response(captured["status"], headers + [("Content-Length", str(len(out)))])
        return [out]
    return app


def serve(storage_url: str, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve :func:`create_app` until interrupted (wsgiref, as optuna-dashboard's own
    command)."""
    from wsgiref.simple_server import make_server
    with make_server(host, port, create_app(storage_url)) as httpd:
        httpd.serve_forever()
