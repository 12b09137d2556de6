"""finetune: distributed LoRA (or full) fine-tuning through a launcher: `local` (torchrun
processes on this machine) or `kubernetes` (a PyTorchJob of `nodes` pods)."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from trainer import settings


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
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.0,
    lora_train_embeddings: bool = False,
    learning_rate: float = 3e-3,
    max_steps: int = 300,
    batch_size: int = 16,
    batch_tokens: int = 0,
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
):
    """Train on `nodes` x `procs_per_node` processes; output the adapter (or full model) and metrics.

    The cluster settings (namespace ... wait_timeout_s, 0 = no limit) shape the PyTorchJob of the
    kubernetes launcher; see trainer.cluster.ClusterSpec.
    A failed node restarts the job up to `max_restarts` times (locally: all nodes; on a cluster:
    the PyTorchJob backoff limit), resuming from the last checkpoint (every `checkpoint_every`
    steps, in runs/<run_id>/checkpoints). The loss history stays in runs/<run_id>/result.json.
    """
    from components.artifacts import log_metrics, read_uri, write_pointer
    from trainer.config import TrainConfig
    from trainer.errors import exit_on_user_error
    from trainer.launch import run_training
    from trainer.report import training_html
    from trainer.storage import Store

    cfg = TrainConfig(model_uri=read_uri(base_model), dataset_uri=read_uri(dataset), output_prefix=f"runs/{run_id}",
                      method=method, lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                      lora_train_embeddings=lora_train_embeddings, learning_rate=learning_rate,
                      max_steps=max_steps, batch_size=batch_size, batch_tokens=batch_tokens,
                      tokens_per_step=tokens_per_step, gradient_checkpointing=gradient_checkpointing, compile=compile,
                      max_seq_len=max_seq_len, seed=seed, checkpoint_every=checkpoint_every)
    cluster = {"namespace": namespace, "accelerator_resource": accelerator_resource, "node_selector": node_selector,
               "tolerations": tolerations, "queue": kueue_queue, "cleanup": cleanup, "wait_timeout_s": wait_timeout_s}
    with exit_on_user_error():
        result = run_training(cfg, launcher, nodes, procs_per_node, Store.from_env(), cluster, run_id, max_restarts)
    write_pointer(adapter, result["output_uri"], {"method": method, "total_bytes": result["output_bytes"]})
    log_metrics(metrics, result["metrics"])
    with open(report.path, "w") as f:  # loss curve (train + eval) and summary, in the KFP UI
        f.write(training_html(result, title=f"Fine-tuning {run_id}"))
    print(f"TensorBoard events: {result['tensorboard_uri']}")
