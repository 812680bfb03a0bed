"""Running the gateway on uvicorn (the ``gateway`` extra), imported when it starts."""

from __future__ import annotations

import logging

from budgetmix._deps import require
from budgetmix.gateway.app import Gateway
from budgetmix.gateway.config import GatewayConfig

__all__ = ["serve"]

log = logging.getLogger("budgetmix.gateway")


def serve(config: GatewayConfig, *, log_level: str = "warning") -> None:
    """Serve ``config`` on ``config.host:config.port`` until interrupted.

    One process holds one connection pool and one store connection; to scale out, run
    more (on other ports or machines) over one store: the store keeps them consistent.

    Raises:
        MissingExtraError: uvicorn is not installed (``budgetmix[gateway]``).
    """
    uvicorn = require("uvicorn", "gateway")
    if config.fail_open:
        log.warning("budgetmix gateway: fail_open is on: with the store down, requests "
                    "go upstream unbudgeted")  # fmt: skip
    app = Gateway(config)
    # idle client connections kept past the SDKs' own 5 s, so a client never reuses one
    # the server is closing (a reset request) as both sides time out together
    uvicorn.run(app, host=config.host, port=config.port, log_level=log_level,
                access_log=False, lifespan="on", timeout_keep_alive=65)  # fmt: skip
