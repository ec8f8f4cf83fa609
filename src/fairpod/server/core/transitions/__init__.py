"""The control plane's transitions, one module per transition (see :mod:`fairpod.server.core`)."""
