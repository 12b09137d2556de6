"""The Hugging Face Hub reached or not: a host name that does not resolve (no network, no DNS) turns on the local
cache only, for the model and dataset downloads alike (trainer.store.delivery, trainer.data.loading)."""

from __future__ import annotations

import contextlib
import os
import time


def offline_if_hub_unresolvable() -> bool:
    """When the Hub's host name does not resolve (no network, no DNS), work from the local HF cache
    as HF_HUB_OFFLINE=1 does; returns whether it did. huggingface_hub retries a failed connection
    5 times over about 24 s, a warning line each: right for a Hub that hiccups, useless for a name
    that does not resolve, and the cache (or the clear "not in the local cache" error) comes at once."""
    import socket
    import urllib.request
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    proxies = urllib.request.getproxies()
    if (proxies.get("https") or proxies.get("all")) and not urllib.request.proxy_bypass(host):
        return False  # a proxy resolves the name (clusters with egress through a proxy and no outside DNS)
    for attempt in range(3):
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
            return False
        except socket.gaierror as err:
            # "Temporary failure" (EAI_AGAIN) is both a DNS blip in a cluster and a laptop without
            # network: asked again twice, 2 s apart, so that a blip is ridden out; "no such name" is final.
            if err.errno != socket.EAI_AGAIN or attempt == 2:
                break
            time.sleep(2)
    print(f"note: {host} does not resolve (offline?): using the local Hugging Face cache only", flush=True)
    os.environ["HF_HUB_OFFLINE"] = "1"  # for what is imported later, and child processes
    constants.HF_HUB_OFFLINE = True  # huggingface_hub and datasets read these at import
    with contextlib.suppress(ImportError):
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True
    return True
