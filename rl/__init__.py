"""Hi-PPO: the learned cross-domain scheduler (environment, networks, trainer)."""
