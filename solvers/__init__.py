"""Solvers: every method returns Plans, scored only by ``formulation``'s evaluator.

``exact`` (Pyomo MILP on HiGHS, OR-Tools CP-SAT), ``bruteforce`` (tiny instances); the
heuristics and baselines follow. Fronts are exchanged as :class:`solvers.front.Front`.
"""
