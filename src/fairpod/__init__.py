"""fairpod: share one accelerator cluster fairly between teams and keep their jobs alive."""

__version__ = "0.1.0"
