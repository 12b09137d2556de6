"""How this process reaches what it deployed, to smoke-test it, and how the user can.

Inside a pod of the cluster (KUBERNETES_SERVICE_HOST is set in every one), a Service answers at
its cluster DNS name. Outside the cluster (a laptop with a kubeconfig) that name does not
resolve; there the requests go through the API server's proxy
(`/api/v1/namespaces/NS/services/NAME:PORT/proxy/...`, or `pods/NAME:PORT/proxy/...`), sent by
the kubernetes client, so they carry the kubeconfig's credentials (token, client certificate,
exec plugin) and trust its CA, as every other API call does. A loopback relay puts that proxy
behind a plain http://127.0.0.1 URL, so the OpenAI smoke test (trainer.serving.client) runs unchanged
either way; the relay stops with the smoke test. What the user can use afterwards is a
`kubectl port-forward` command, which the deploy backends print.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import urlparse

from trainer.core.errors import UserError
from trainer.k8s.lifecycle import ready_pod

# Longer than trainer.serving.client.chat's own timeout (120 s): the client gives up first, with its message.
RELAY_TIMEOUT_S = 130


def in_cluster(api_client) -> bool:
    """Whether the cluster's DNS names resolve here: this process runs in a pod (the kubelet sets
    KUBERNETES_SERVICE_HOST in every one) of the cluster that `api_client` talks to, as with the
    in-cluster configuration. A pod using a kubeconfig for another cluster goes through its API."""
    here = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    return bool(here) and urlparse(api_client.configuration.host).hostname == here.strip("[]")


def dns_url(service: str, namespace: str, port: int) -> str:
    return f"http://{service}.{namespace}.svc.cluster.local" + ("" if port == 80 else f":{port}")


@contextlib.contextmanager
def proxied(api_client, proxy_path: str) -> Iterator[str]:
    """A loopback base URL whose requests go to the API server's proxy at `proxy_path`
    (`/api/v1/namespaces/NS/services/NAME:PORT/proxy`); closed on exit."""
    server = _RelayServer(
        ("127.0.0.1", 0), type("Relay", (_Relay,), {"api": api_client, "prefix": proxy_path.rstrip("/")})
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield url
    except UserError as err:
        # The loopback address means nothing to the user: name the proxy, and what it last answered
        # (403: the kubeconfig's user may not use it; 503: no ready endpoints).
        last = f" (the API server's proxy last answered {server.last_error})" if server.last_error else ""
        raise UserError(str(err).replace(url, f"{api_client.configuration.host}{proxy_path}") + last) from None
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def service(api_client, namespace: str, name: str, port: int) -> Iterator[str]:
    """The base URL by which this process reaches Service `name`:`port`: its DNS name in a pod,
    else the API server's service proxy behind a loopback relay."""
    if in_cluster(api_client):
        yield dns_url(name, namespace, port)
        return
    with proxied(api_client, f"/api/v1/namespaces/{namespace}/services/{name}:{port}/proxy") as url:
        yield url


@contextlib.contextmanager
def pod(
    api_client, namespace: str, url: str, port: int, selector: str, what: str, role: str, tls: bool = False
) -> Iterator[str]:
    """The base URL by which this process reaches a server at `url` in the cluster: `url` itself in
    a pod, else the API server's pod proxy to the newest ready pod matching `selector` (`what`'s
    `role` pods, trainer.k8s.lifecycle.ready_pod) behind a loopback relay. `tls`: the pod serves
    HTTPS with a certificate of its own, which this process would not trust: the proxy even in a pod."""
    if in_cluster(api_client) and not tls:
        yield url
        return
    from kubernetes import client as k

    target = f"{'https:' if tls else ''}{ready_pod(k.CoreV1Api(api_client), namespace, selector, what, role)}:{port}"
    with proxied(api_client, f"/api/v1/namespaces/{namespace}/pods/{target}/proxy") as relay:
        yield relay


def newest_pod(namespace: str, selector: str) -> str:
    """A port-forward target that names the pod by label: still right after the pod is replaced."""
    return f"$(kubectl -n {namespace} get pod -l {selector} -o name | head -n 1)"


def port_forward(namespace: str, target: str, port: int, remote_port: int | None = None) -> str:
    """What the user runs to reach `target` (svc/NAME, pod/NAME) from their machine, and the URL then."""
    return (
        f"kubectl -n {namespace} port-forward {target} {port}:{remote_port or port}  (then http://127.0.0.1:{port}/v1)"
    )


class _RelayServer(ThreadingHTTPServer):
    last_error = ""  # the proxy's last refusal, for the message when the smoke test fails


class _Relay(BaseHTTPRequestHandler):
    """One request in, the same request through the API server's proxy, its answer back."""

    api: Any = None  # a kubernetes ApiClient, set on the subclass `relay` makes
    prefix = ""
    server: _RelayServer

    def log_message(self, *args):  # the smoke test reports what matters
        pass

    def do_GET(self):
        self._relay("GET")

    def do_POST(self):
        self._relay("POST")

    def _relay(self, method: str) -> None:
        from kubernetes.client.exceptions import ApiException

        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            # The client serializes JSON bodies itself: hand it the object (the OpenAI API is JSON only).
            body = json.loads(raw) if raw else None
        except ValueError:
            return self._answer(400, b'{"error": "the relay forwards JSON bodies only"}')
        try:
            resp = self.api.call_api(
                self.prefix + self.path,
                method,
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=RELAY_TIMEOUT_S,
            )
            self._answer(resp.status, resp.data)
        except ApiException as err:  # the proxied service's own error status, or the API server's (503: no endpoints)
            self._answer(
                err.status or 502, (err.body if isinstance(err.body, bytes) else str(err.body or err.reason).encode())
            )
        except Exception as err:  # noqa: BLE001 - the API server unreachable: the client sees a 502 and retries
            self._answer(502, json.dumps({"error": f"API server proxy: {type(err).__name__}: {err}"}).encode())

    def _answer(self, status: int, data: bytes) -> None:
        if status >= 400:
            self.server.last_error = f"{status}: {data[:300].decode('utf-8', 'replace')}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
