"""The batch tests' server: the module's test server, reset, its batches completing at their first poll."""

from __future__ import annotations

import pytest

from beameval.testserver.harness import ServerProcess


@pytest.fixture
def batch_server(clean_server: ServerProcess) -> ServerProcess:
    clean_server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
    return clean_server
