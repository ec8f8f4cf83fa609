"""The live tests of 'fairpod export kueue' and 'fairpod hyp' run a real fairpod server, as the server tests do."""

from tests.server.conftest import Server, server, wait_for  # noqa: F401
