"""The trace schema, metric results and the capture file format.

Internal: import the public names from ``agenteval_core``."""
