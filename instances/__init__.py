"""Seeded scenario generator for cross-domain training plans (SPEC sections 1 and 6).

``instances.generate`` builds an :class:`formulation.instance.Instance` from a topology
(``instances.topologies``: random, cn-hubs, aws-10), random domain sizes and, optionally, a
dynamic trace (``instances.traces``). The generator is not imported here, so that
``python -m instances.generate`` runs it as a fresh module.
"""
