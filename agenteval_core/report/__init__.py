"""The self-contained HTML report.

Internal: import the public names from ``agenteval_core``."""
