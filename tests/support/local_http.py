"""A real HTTP server on a free local port, answering every request with one fixed reply: what a
Connect connection meets when it points at something else (a proxy's login page, another service)."""
from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serving(body: str, content_type: str, status: int = 200, first: list[tuple[int, str]] | None = None
            ) -> Iterator[str]:
    """Serve `body` to every GET, PUT, POST, PATCH and DELETE, after the (status, body) replies of
    `first`, one a request; yields the server's URL."""
    replies = list(first or [])

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            code, text = replies.pop(0) if replies else (status, body)
            payload = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = answer

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
