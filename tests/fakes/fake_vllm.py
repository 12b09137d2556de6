"""python -m tests.fakes.fake_vllm --host H --port P [vLLM's other server arguments, ignored]

A stand-in for vLLM's OpenAI server as `trainer serve` runs it (put its name in
trainer.serving.local.SERVER_MODULE): it answers /v1/models at once, and is slow to stop, as vLLM is:
on SIGTERM it says so on stdout (the server's log) and exits only once the file named by
FAKE_VLLM_RELEASE exists (60 s at most), so that a test can act while `trainer serve` is stopping it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def stop(_signum, _frame):
    print("fake vLLM: SIGTERM, stopping", flush=True)
    release = os.environ.get("FAKE_VLLM_RELEASE", "")
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    signal.signal(signal.SIGTERM, stop)
    server = HTTPServer((args.host, args.port), Models)
    print(f"fake vLLM: serving on {args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    sys.exit(main())
