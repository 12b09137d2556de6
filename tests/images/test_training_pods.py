"""The training job `submit --dry-run --param nodes=2` renders, run as two containers of the project image, one per
node: exactly the rendered command, arguments, environment, user and security settings (tests/images/pods.py),
plus what the operator injects (Kubeflow Trainer v2.3.0's torch plugin: PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK from the JobSet completion index, PET_MASTER_ADDR `<job>-node-0-0.<job>`, PET_MASTER_PORT 29500;
the Training Operator v1.9: MASTER_ADDR `<job>-master-0`, MASTER_PORT 23456, WORLD_SIZE, RANK = the replica's
rank, the same PET_* and PYTHONUNBUFFERED). Their DNS names resolve to loopback: the two containers meet over TCP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from tests.images import pods

pytestmark = pytest.mark.images
STEPS, EVERY = 30, 10
SECRETS = {}  # filled from s3_env: the Secret keys the pods name


def render(launcher: str, s3_env, **params) -> dict:
    """The training job object `python -m pipelines.submit --dry-run` prints (S3 from this test's settings)."""
    argv = [sys.executable, "-m", "pipelines.submit", "--dry-run", "--param", f"launcher={launcher}", "--param",
            "nodes=2", "--param", "deploy_backend=kubernetes", "--param", "accelerator_resource=",
            *(f"--param={k}={v}" for k, v in params.items())]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **s3_env}, timeout=300)
    assert done.returncode == 0, done.stderr
    kind = "TrainJob" if launcher == "trainjob" else "PyTorchJob"
    return next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == kind)


def filled(args: list[str], model: str, dataset: str, prefix: str) -> list[str]:
    """The placeholders a dry run prints for what the pipeline fills in at run time."""
    values = {"--model-uri": model, "--dataset-uri": dataset, "--output-prefix": prefix}
    return [f"{a.split('=')[0]}={values[a.split('=')[0]]}" if a.split("=")[0] in values else a for a in args]


def trainjob_nodes(job: dict, model: str, dataset: str, prefix: str) -> list[tuple[dict, dict, dict, dict]]:
    """[(container, pod spec, operator env, hosts)] per node of a TrainJob."""
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_spec = pod["template"]["spec"]["template"]["spec"]
    patch = next(c for c in pod_spec["containers"] if c["name"] == "node")  # the torch plugin's container name
    command = filled(trainer["command"] + trainer.get("args", []), model, dataset, prefix)
    container = {**patch, "image": trainer["image"], "command": command, "env": trainer["env"]}
    master = f"{name}-node-0-0.{name}"
    nodes = []
    for rank in range(trainer["numNodes"]):
        env = dict(PET_NNODES=str(trainer["numNodes"]), PET_NPROC_PER_NODE=str(trainer.get("numProcPerNode", 1)),
                   PET_NODE_RANK=str(rank), PET_MASTER_ADDR=master, PET_MASTER_PORT="29500")  # fmt: skip
        nodes.append((container, pod_spec, env, {master: "127.0.0.1"}))
    return nodes


def pytorchjob_nodes(job: dict, model: str, dataset: str, prefix: str) -> list[tuple[dict, dict, dict, dict]]:
    name, specs = job["metadata"]["name"], job["spec"]["pytorchReplicaSpecs"]
    nproc = job["spec"].get("nprocPerNode", "auto")
    per_node = int(nproc) if nproc.isdigit() else 1  # the operator counts auto as 1
    total = sum(s["replicas"] for s in specs.values())
    master = f"{name}-master-0"
    nodes = []
    for rank, kind in enumerate(["Master"] + ["Worker"] * specs.get("Worker", {}).get("replicas", 0)):
        pod_spec = specs[kind]["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c["name"] == "pytorch")  # the operator's rule
        container = {**container, "command": filled(container["command"] + container.get("args", []), model,
                                                     dataset, prefix), "args": []}  # fmt: skip
        env = dict(PYTHONUNBUFFERED="1", MASTER_ADDR=master, MASTER_PORT="23456", WORLD_SIZE=str(total * per_node),
                   RANK=str(rank), PET_MASTER_ADDR=master, PET_MASTER_PORT="23456", PET_NNODES=str(total),
                   PET_NODE_RANK=str(rank), PET_NPROC_PER_NODE=nproc)  # fmt: skip
        nodes.append((container, pod_spec, env, {master: "127.0.0.1"}))
    return nodes


def start_nodes(nodes, secrets, tag: str, tmp_path):
    procs = []
    for rank, (container, pod_spec, env, hosts) in enumerate(nodes):
        args = pods.podman_args(container, pod_spec, name=f"{tag}-{rank}", env=env, secrets=secrets, hosts=hosts,
                                work=tmp_path)  # fmt: skip
        procs.append(pods.start(args, tmp_path / f"{tag}-{rank}.log"))
    return procs


def wait_all(procs, limit_s: float) -> list[int]:
    deadline = time.monotonic() + limit_s
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 1)))
        except subprocess.TimeoutExpired:
            pods.remove_test_containers()
            raise AssertionError(f"a node did not finish within {limit_s} s") from None
    return codes


@pytest.fixture
def delivered(s3_env, builtin_uris):
    secrets = {("llm-finetune-s3", "accesskey"): s3_env["AWS_ACCESS_KEY_ID"],
               ("llm-finetune-s3", "secretkey"): s3_env["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    yield (*builtin_uris, secrets)
    pods.remove_test_containers()


@pytest.fixture(scope="module")
def two_processes(s3_env, builtin_uris):
    """The same training as 2 processes of one machine, in this checkout's venv: the loss to match."""
    from trainer.core.storage import Store

    job = render("trainjob", s3_env, max_steps=STEPS, checkpoint_every=EVERY)
    prefix = f"runs/local-{uuid.uuid4().hex[:8]}"
    args = filled(job["spec"]["trainer"]["command"], *builtin_uris, prefix)
    assert args[:6] == ["python", "-m", "trainer.recipe.torchrun", "-m", "trainer", "train"]
    cmd = [sys.executable, "-m", "trainer.recipe.torchrun", "--nproc-per-node", "2", *args[3:]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return Store.from_env().get_json(f"{prefix}/result.json")["metrics"]


@pytest.mark.parametrize("launcher", ["trainjob", "pytorchjob"])
def test_two_containers_train_together_as_two_processes_do(launcher, s3_env, delivered, two_processes, tmp_path):
    from trainer.core.storage import Store

    model, dataset, secrets = delivered
    job = render(launcher, s3_env, max_steps=STEPS, checkpoint_every=EVERY)
    prefix = f"runs/{launcher}-{uuid.uuid4().hex[:8]}"
    nodes = (trainjob_nodes if launcher == "trainjob" else pytorchjob_nodes)(job, model, dataset, prefix)
    codes = wait_all(start_nodes(nodes, secrets, launcher, tmp_path), 900)
    logs = [(tmp_path / f"{launcher}-{r}.log").read_text() for r in range(2)]
    assert codes == [0, 0], logs
    result = Store.from_env().get_json(f"{prefix}/result.json")["metrics"]
    assert result["world_size"] == 2 and result["train_steps"] == STEPS
    # one process per container, the gradients averaged over TCP: the same run as two processes on one machine
    assert result["train_loss"] == pytest.approx(two_processes["train_loss"], rel=1e-3), (result, two_processes)


def test_a_killed_node_ends_the_other_and_the_restarted_pair_resumes(s3_env, delivered, two_processes, tmp_path):
    from trainer.core.storage import Store

    model, dataset, secrets = delivered
    job = render("trainjob", s3_env, max_steps=STEPS, checkpoint_every=EVERY)
    prefix = f"runs/killed-{uuid.uuid4().hex[:8]}"
    nodes = trainjob_nodes(job, model, dataset, prefix)
    store = Store.from_env()
    procs = start_nodes(nodes, secrets, "first", tmp_path)
    deadline = time.monotonic() + 600
    while not store.complete_children(f"{prefix}/checkpoints"):  # the first checkpoint is in the bucket
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), (
            tmp_path / "first-0.log"
        ).read_text()[-3000:]
        time.sleep(1)
    images_kill = subprocess.run(["podman", "kill", "first-1"], env=pods.images.env(), capture_output=True, text=True)
    assert images_kill.returncode == 0, images_kill.stderr
    killed_at = time.monotonic()
    code = wait_all(procs[:1], 300)[0]  # within the limit, not a hang on the dead peer
    ended_s = time.monotonic() - killed_at
    survivor = (tmp_path / "first-0.log").read_text()
    assert code not in (0, 2), survivor[-3000:]  # failed, and retryable: the operator restarts it
    print(f"node 0 ended {ended_s:.1f} s after node 1 was killed, exit {code}")
    procs[1].wait(timeout=60)
    # the operator's restart: both pods again, the same command; training resumes from the bucket's checkpoint
    codes = wait_all(start_nodes(nodes, secrets, "again", tmp_path), 900)
    again = (tmp_path / "again-0.log").read_text()
    assert codes == [0, 0], again[-3000:]
    result = store.get_json(f"{prefix}/result.json")["metrics"]
    assert result["restarts"] >= 1 and result["train_steps"] == STEPS
    # exact resume: the interrupted pair ends where the uninterrupted two processes did
    assert result["train_loss"] == pytest.approx(two_processes["train_loss"], rel=1e-3), (result, two_processes)
