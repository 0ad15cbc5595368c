"""The scoring engine and the sinks.

Internal: import the public names from ``agenteval_core``."""
