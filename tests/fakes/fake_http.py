"""Plumbing shared by the fake API servers (tests/*_fake_api.py): a JSON HTTP handler that
records every request and dispatches by regex route, and a loopback server in a thread."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class RoutedHandler(BaseHTTPRequestHandler):
    """Subclasses set `routes` [(method_name, regex)] and `state` (with .requests and .lock)."""

    routes: list[tuple[str, str]] = []
    state: Any = None

    def log_message(self, *args):  # keep test output clean
        pass

    def send_json(self, code: int, body: Any) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:  # multipart uploads
            body = raw
        with self.state.lock:
            self.state.requests.append((method, self.path, body))
        for handler, pattern in self.routes:
            m = re.match(pattern, url.path)
            if m:
                code, out = getattr(self, handler)(method, *m.groups(), query=query, body=body)
                return self.send_json(code, out)
        self.send_json(404, {"code": 404, "message": f"no route for {method} {url.path}"})

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")


def calls(state, method: str, pattern: str) -> list[tuple[str, str, Any]]:
    return [r for r in state.requests if r[0] == method and re.search(pattern, r[1])]


class LoopbackServer:
    """Serve `handler` (bound to `state`) on 127.0.0.1 in a daemon thread."""

    def __init__(self, handler: type, state: Any):
        bound = type(f"Bound{handler.__name__}", (handler,), {"state": state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), bound)
        # close() waits for the serving loop's next poll: 0.5 s by default, at the end of every test
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
