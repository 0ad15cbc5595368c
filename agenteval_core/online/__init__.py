"""The live path: recording framework events, the loop guard, the online evaluator.

Internal: import the public names from ``agenteval_core``."""
