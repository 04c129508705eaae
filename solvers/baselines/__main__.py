"""``python -m solvers.baselines INSTANCE --method NAME --out FRONT.json``.

Options: ``--seed S`` (dtfm's GA), ``--sync-every H`` (diloco), ``--beam B`` (sailor).
Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from formulation.instance import Instance
from formulation.outputs import output_path, report_stream
from formulation.schema import SEED, CliParser, integer_arg, run_cli
from solvers.baselines import METHODS, baseline_front
from solvers.baselines.diloco import DEFAULT_SYNC_EVERY
from solvers.baselines.dtfm import GaSettings
from solvers.baselines.sailor import DEFAULT_BEAM
from solvers.front import command_line


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m solvers.baselines",
                       description="Run one of the papers' baselines on an instance.")
    parser.add_argument("instance", type=Path, help="instance JSON")
    parser.add_argument("--method", required=True, choices=list(METHODS),
                        help="the baseline to run")
    parser.add_argument("--out", type=str, required=True, help="front JSON to write")
    parser.add_argument("--quiet", action="store_true", help="no report line")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed, 0 to 2^32 - 1, of dtfm's GA (default 0; the other "
                             "methods are deterministic)")
    parser.add_argument("--sync-every", type=integer_arg(1, 1_000_000), default=DEFAULT_SYNC_EVERY,
                        help="diloco: inner steps between WAN syncs (H)")
    parser.add_argument("--beam", type=integer_arg(1, 100_000), default=DEFAULT_BEAM,
                        help="sailor: region chains kept per length")
    args = parser.parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    args.out = output_path(args.out, inputs=[args.instance])
    instance = Instance.load(args.instance)
    options = {"dtfm": {"settings": GaSettings(seed=args.seed)},
               "diloco": {"sync_every": args.sync_every},
               "sailor": {"beam": args.beam}}.get(args.method, {})
    front = baseline_front(instance, args.method, command_line("solvers.baselines"), **options)
    front.save(args.out, instance)
    provenance = front.provenance
    print(f"{instance.name}: {args.method}: {len(front.points)} front points from "
          f"{provenance['decisions']} decisions ({provenance['candidates_scored']} plans "
          f"scored, {len(provenance['infeasible_decisions'])} infeasible) in "
          f"{provenance['wall_time_s']:.2f} s -> {args.out}",
          file=report_stream(args.out, args.quiet))


if __name__ == "__main__":
    sys.exit(main())
