"""Where work units run: in this process, in a local process pool, or on a Dask cluster.

All three run :func:`evaluation.units.run_unit` on the same picklable units and return the
records in unit order, so the numbers do not depend on where they were computed (the
measured times aside). A Dask scheduler address is anything ``distributed.Client`` takes
(``tcp://host:8786``); the cluster's workers need this package installed.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from evaluation.units import WorkUnit, run_unit


def run_units(units: Sequence[WorkUnit], workers: int = 1, scheduler: str | None = None,
              on_done: Callable[[WorkUnit], None] | None = None,
              connect_timeout_s: float = 20.0) -> list[dict]:
    """The records of ``units``, in order; ``on_done`` is called as each one finishes."""
    records: list[dict | None] = [None] * len(units)
    done = on_done or (lambda unit: None)
    if scheduler is not None:
        _run_on_dask(units, scheduler, records, done, connect_timeout_s)
    elif workers <= 1:
        for i, unit in enumerate(units):
            records[i] = run_unit(unit)
            done(unit)
    else:
        # spawn: forked children would inherit the parent's threads (progress bar, BLAS)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = {pool.submit(run_unit, unit): i for i, unit in enumerate(units)}
            for future in as_completed(futures):
                records[futures[future]] = future.result()
                done(units[futures[future]])
    return [record for record in records if record is not None]


def _run_on_dask(units: Sequence[WorkUnit], scheduler: str, records: list,
                 done: Callable[[WorkUnit], None], connect_timeout_s: float) -> None:
    from distributed import Client
    from distributed import as_completed as dask_completed

    try:
        client = Client(scheduler, timeout=f"{connect_timeout_s}s")
    except (OSError, TimeoutError) as err:
        raise ConnectionError(f"--scheduler: cannot reach a Dask scheduler at {scheduler!r} "
                              f"({err})") from None
    with client:
        futures = client.map(run_unit, list(units), pure=False)
        position = {future.key: i for i, future in enumerate(futures)}
        for future in dask_completed(futures):
            i = position[future.key]
            records[i] = future.result()
            done(units[i])
