"""finetune: distributed LoRA (or full) fine-tuning through a launcher: `local` (torchrun
processes on this machine) or `kubernetes` (a PyTorchJob of `nodes` pods)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def finetune(
    base_model: Input[Model],
    dataset: Input[Dataset],
    run_id: str,
    adapter: Output[Model],
    metrics: Output[Metrics],
    report: Output[HTML],
    launcher: str = "local",
    nodes: int = 2,
    procs_per_node: int = 1,
    method: str = "lora",
    lora_r: int = 64,
    lora_alpha: int = 64,
    lora_dropout: float = 0.0,
    lora_train_embeddings: bool = True,
    learning_rate: float = 1e-3,
    max_steps: int = 800,
    batch_size: int = 8,
    batch_tokens: int = 512,
    tokens_per_step: int = 0,
    gradient_checkpointing: bool = False,
    compile: bool = False,
    max_seq_len: int = 512,
    seed: int = 0,
    checkpoint_every: int = 100,
    max_restarts: int = 2,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
    kueue_queue: str = "",
    cleanup: str = "on-success",
    wait_timeout_s: int = 0,
    training_runtime: str = "torch-distributed",
    stall_timeout_s: float = 1800.0,
):
    """Train on `nodes` x `procs_per_node` processes; output the adapter (or full model) and metrics.

    The cluster settings (namespace ... wait_timeout_s, 0 = no limit) shape the PyTorchJob of the
    kubernetes launcher; see trainer.k8s.podspec.ClusterSpec.
    A failed node restarts the job up to `max_restarts` times (locally: all nodes; on a cluster:
    the PyTorchJob backoff limit), resuming from the last checkpoint (every `checkpoint_every`
    steps, in runs/<run_id>/checkpoints). The loss history stays in runs/<run_id>/result.json.
    Where MLFLOW_TRACKING_URI is set, training logs its settings and losses to MLflow (trainer.core.tracking).
    """
    params = dict(locals())  # first statement: only the parameters are local yet
    import os

    from components.artifacts import log_metrics, read_uri, write_pointer
    from trainer.config.training import TrainConfig
    from trainer.core.errors import exit_on_user_error
    from trainer.launch import cluster_from_params, run_training
    from trainer.evaluate.report import training_html
    from trainer.core.storage import Store
    from trainer.core.tracking import Tracker

    cfg = TrainConfig.from_params(
        params, model_uri=read_uri(base_model), dataset_uri=read_uri(dataset), output_prefix=f"runs/{run_id}"
    )
    with exit_on_user_error():
        rows = (dataset.metadata.get("rows") or {}).get("train")  # counted on delivery: too few fails before a job
        if rows is not None:
            from trainer.data.batching import check_rows

            check_rows(int(rows), batch_size, nodes * procs_per_node, batch_tokens)
        store = Store.from_env()
        if local_run := os.environ.get("FINETUNE_LOCAL_RUN"):  # run_local: a failed run finds its events by this
            store.put_json(f"runs/{run_id}/local-run/{local_run}", {})
        tracker = Tracker.from_env(run_name=f"finetune {run_id}")
        tracker.share()  # rank 0 logs to this run, restarted or on the job's pods (trainer.core.tracking.forwarded_env)
        with tracker:
            result = run_training(cfg, launcher, cluster_from_params(params), store, run_id)
    write_pointer(
        adapter,
        result["output_uri"],
        {"method": method, "total_bytes": result["output_bytes"], "tensorboard_uri": result["tensorboard_uri"]},
    )
    log_metrics(metrics, result["metrics"])
    with open(report.path, "w") as f:  # loss curve (train + eval) and summary, in the KFP UI
        f.write(training_html(result, title=f"Fine-tuning {run_id}"))
    print(f"TensorBoard events: {result['tensorboard_uri']}")
