"""Scoring methods against the exact reference fronts (SPEC section 7)."""
