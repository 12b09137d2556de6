"""validate_params: the pipeline's first step. Checks every parameter and fails in seconds
with one message listing each problem, before any download or GPU is touched (run_local and
submit check the same before launching; this covers runs started from the KFP UI)."""

from kfp import dsl

from trainer import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def validate_params(
    model_source: str, dataset_source: str, eval_fraction: float, launcher: str, nodes: int, procs_per_node: int,
    method: str, lora_r: int, lora_alpha: int, lora_dropout: float, lora_train_embeddings: bool,
    learning_rate: float, max_steps: int, batch_size: int, batch_tokens: int, max_seq_len: int, seed: int, checkpoint_every: int,
    max_restarts: int, eval_max_rows: int, deploy_backend: str, accelerator_resource: str, tolerations: list,
    cleanup: str, wait_timeout_s: int,
):
    """Raise (exit 2, one message) when any parameter is invalid."""
    params = dict(locals())  # first statement: only the parameters are local yet
    from trainer.errors import exit_on_user_error
    from trainer.validate import validate_pipeline_params

    with exit_on_user_error():
        validate_pipeline_params(params)
    print("parameters OK")
