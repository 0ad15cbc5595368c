"""EvalSuite: run an agent k times per case and report pass@k / pass^k.

Internal: import the public names from ``agenteval_core``."""
