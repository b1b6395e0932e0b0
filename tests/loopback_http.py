"""An HTTP server on 127.0.0.1 for the download tests: what a test serves, and nothing leaves the machine.

:class:`LoopbackServer` starts a threaded server on a free loopback port; a subclass says how a
``GET`` is answered (:meth:`LoopbackServer.answer`); ``with`` closes it. :func:`direct_and_quick` makes
requests to it skip any proxy the environment names and the downloader's retries skip their back-off
sleeps (conftest's ``no_proxy_no_wait`` fixture applies it to a test).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 (``url``); ``answer`` replies to each ``GET``."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # noqa: ANN002 - quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                try:
                    owner.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a bounded download does

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        """Reply to one ``GET`` (``handler.path``, ``handler.headers``); 404 unless a subclass serves."""
        handler.send_error(404)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def direct_and_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback requests never go through a proxy from the environment, no catalog mirror is set,
    and the downloader's retries do not sleep."""
    from modforge.data import download
    from modforge.data.images import catalog

    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.delenv(catalog.MIRROR_ENV, raising=False)
    monkeypatch.setattr(download, "BACKOFF", 0.0)
