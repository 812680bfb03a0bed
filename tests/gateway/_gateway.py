"""A gateway served by uvicorn in a thread of the test process, on a loopback port."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from _servers import free_port, wait_port
from budgetmix.gateway import Gateway, GatewayConfig


class GatewayThread:
    def __init__(self, config: GatewayConfig, **kwargs: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.app = Gateway(config, **kwargs)
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error",
                             access_log=False, lifespan="on")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()),
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> GatewayThread:
        self.thread.start()
        wait_port(self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
