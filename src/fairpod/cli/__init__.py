"""The ``fairpod`` command."""
