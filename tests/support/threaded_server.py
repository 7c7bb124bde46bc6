"""A uvicorn server on a thread of the test process: the stand-in HTTP APIs the tests point the
services at (a model API that records requests, tests/support/recording_model.py and compaction_model.py)."""

from __future__ import annotations

import threading
from typing import Any

import uvicorn

from tests.support.polling import wait_sync


class ThreadedServer:
    def __init__(self, app: Any, port: int) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        wait_sync(lambda: self._server.started, timeout=20, interval=0.05, what="the stand-in server started")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
