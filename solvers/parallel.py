"""Where independent tasks run: in this process, in a local process pool, or on a Dask cluster.

All three call the same picklable function on the same picklable tasks and return the results
in task order, so what is computed does not depend on where (the measured times aside). The
exact sweep's units (:mod:`solvers.exact`) and the evaluation's work units
(:mod:`evaluation.runner`) both run through :func:`map_tasks`. A Dask scheduler address is
anything ``distributed.Client`` takes (``tcp://host:8786``); its workers need this package.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import numba


def _start_worker(threads: int) -> None:
    """A worker ignores Ctrl-C (the terminal sends it to the whole process group): the
    parent stops the pool, so the worker prints nothing of its own. Its compiled kernels
    use its share of the cores (``threads``; :func:`solvers.label_kernels.threads_pay`),
    so that the pool's workers do not take each other's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _kernel_threads(threads)


def _one_thread(function: Callable[[Any], Any], task: Any) -> Any:
    """``function(task)`` with one thread for the compiled kernels: a Dask worker runs a
    task on each of its threads, one a core as a rule (numba's setting is per thread)."""
    _kernel_threads(1)
    return function(task)


def _kernel_threads(count: int) -> None:
    """This thread's compiled kernels use at most ``count`` threads."""
    with contextlib.suppress(ValueError):  # no threading layer loads: the tables are serial
        numba.set_num_threads(count)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` spawned processes (forked children would inherit the parent's
    threads, such as a progress bar, BLAS and HiGHS's process-wide thread pool). On any
    error, Ctrl-C or SIGTERM in the parent, the queued tasks are cancelled and the workers
    stopped at once, instead of the pool finishing every queued task before the error
    surfaces."""
    # numba's thread count follows NUMBA_NUM_THREADS, else the cores this process may use
    threads = max(1, numba.config.NUMBA_NUM_THREADS // workers)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(
        "spawn"), initializer=_start_worker, initargs=(threads,))
    try:
        yield pool
    except BaseException:
        processes = list((pool._processes or {}).values())  # noqa: SLF001 (no public handle)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
        raise
    pool.shutdown()


def map_tasks(function: Callable[[Any], Any], tasks: Sequence[Any], workers: int = 1,
              scheduler: str | None = None, on_done: Callable[[int, Any], None] | None = None,
              connect_timeout_s: float = 20.0) -> list[Any]:
    """``[function(task) for task in tasks]``, run where asked; ``on_done(index, result)`` is
    called as each task finishes. An unreachable scheduler raises ``ConnectionError``."""
    results: list[Any] = [None] * len(tasks)
    done = on_done or (lambda index, result: None)
    if scheduler is not None:
        _on_dask(function, tasks, scheduler, results, done, connect_timeout_s)
    elif workers <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            results[i] = function(task)
            done(i, results[i])
    else:
        with worker_pool(workers) as pool:
            futures = {pool.submit(function, task): i for i, task in enumerate(tasks)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                done(i, results[i])
    return results


def _on_dask(function: Callable[[Any], Any], tasks: Sequence[Any], scheduler: str,
             results: list, done: Callable[[int, Any], None], connect_timeout_s: float) -> None:
    from distributed import Client
    from distributed import as_completed as dask_completed

    try:
        client = Client(scheduler, timeout=f"{connect_timeout_s}s")
    except (OSError, TimeoutError, ValueError, TypeError) as err:  # unreachable, malformed
        raise ConnectionError(f"--scheduler: cannot reach a Dask scheduler at {scheduler!r} "
                              f"({' '.join(str(err).split())})") from None
    with client:
        futures = client.map(functools.partial(_one_thread, function), list(tasks),
                             pure=False)
        position = {future.key: i for i, future in enumerate(futures)}
        for future in dask_completed(futures):
            i = position[future.key]
            results[i] = future.result()
            done(i, results[i])
