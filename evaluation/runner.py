"""Where work units run: in this process, in a local process pool, or on a Dask cluster.

All three run :func:`evaluation.units.run_unit` on the same picklable units through
:func:`solvers.parallel.map_tasks` and return the records in unit order, so the numbers do
not depend on where they were computed (the measured times aside). A Dask scheduler address
is anything ``distributed.Client`` takes (``tcp://host:8786``); the cluster's workers need
this package installed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from evaluation.units import WorkUnit, run_unit
from formulation.schema import MAX_WORKERS, integer_arg
from solvers.parallel import map_tasks


def add_where_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The flags of an evaluation command that say where results go (``--out``, default
    ``out``/) and where its units run (``--workers``, ``--scheduler``)."""
    parser.add_argument("--out", type=str, default=out,
                        help="results directory, swapped in whole at the end (default "
                             f"{out}/; its parent must exist)")
    parser.add_argument("--workers", type=integer_arg(1, MAX_WORKERS),
                        default=min(os.cpu_count() or 1, MAX_WORKERS),
                        help="local worker processes (default: one per CPU)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run the units on this Dask scheduler instead")


def run_units(units: Sequence[WorkUnit], workers: int = 1, scheduler: str | None = None,
              on_done: Callable[[WorkUnit], None] | None = None,
              connect_timeout_s: float = 20.0) -> list[dict]:
    """The records of ``units``, in order; ``on_done`` is called as each one finishes."""
    done = on_done or (lambda unit: None)
    records = map_tasks(run_unit, units, workers, scheduler,
                        on_done=lambda i, record: done(units[i]),
                        connect_timeout_s=connect_timeout_s)
    return [record for record in records if record is not None]
