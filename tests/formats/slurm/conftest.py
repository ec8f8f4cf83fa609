"""Slurm and PyTorchJob tests run a real fairpod server (``fairpod up --foreground``), as the server tests do."""

from tests.server.conftest import Activity, Server, server, wait_for  # noqa: F401
