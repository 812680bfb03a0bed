from __future__ import annotations

from collections.abc import Iterator

import pytest
from _servers import RedisProcess


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    server = RedisProcess().start()
    yield server
    server.stop()
