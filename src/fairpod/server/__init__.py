"""The control plane: HTTP API, auth and team RBAC, and the reconcile loop that feeds the engine."""
