"""Offline replay of capture files through the engine.

Internal: import the public names from ``agenteval_core``."""
