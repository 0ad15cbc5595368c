"""Embedders: the local default, an OpenAI-compatible endpoint, sentence-transformers.

Internal: import the public names from ``agenteval_core``."""
