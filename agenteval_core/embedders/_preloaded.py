"""Importing this module loads the default embedder's model.

The replay's fork server imports it once, so every worker forked from it starts with the
model loaded (about 0.15 s of CPU a worker otherwise, at the start of every replay) and all
of them read one copy of its vectors (31 MB)."""

from __future__ import annotations

import logging

from ._static import default_embedder

try:
    default_embedder().load()
except Exception as exc:  # a worker that needs the model loads it itself and says why
    logging.getLogger("agenteval").debug("the default embedder did not load: %s", exc)
