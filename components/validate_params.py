"""validate_params: the first step of both pipelines. Checks every parameter with the rules
run_local and submit apply (trainer.validate, Kubernetes rules included) and fails in seconds
with one message listing each problem, before any download or GPU is touched: a run started
from the KFP UI is checked exactly as one started from the command line.

Its inputs are every parameter of the finetune and sweep pipelines (KFP needs them spelled
out and typed); the pipelines pass their own arguments by name (`pipelines.dag.tasks.inputs_for`),
and a test fails when a pipeline parameter is missing here. Defaults stand in for the
parameters a pipeline lacks (the sweep has no batch_size); `sweep=True` (the sweep pipeline
passes it) checks the sweep's own parameters too, trials=[] included.
"""

from kfp import dsl

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def validate_params(
    model_source: str = "builtin:tiny-llama",
    model_revision: str = "",
    chat_template: str = "model",
    dataset_source: str = "builtin:function-calling",
    dataset_revision: str = "",
    eval_fraction: float = 0.1,
    irrelevance_share: float = 0.0,
    irrelevance_reply: str = "None of the available tools can do that.",
    irrelevance_distractors: float = 0.0,
    name_masking: float = 0.0,
    launcher: str = "local",
    nodes: int = 1,
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
    eval_max_rows: int = 200,
    eval_engine: str = "auto",
    min_fc_accuracy: float = 0.0,
    eval_suites: str = "heldout",
    bfcl_rows: int = 25,
    bfcl_source: str = "",
    max_category_drop: float = 0.1,
    gate_significance: float = 0.0,
    max_drop_by_category: str = "",
    merge_scales: str = "1.0",
    deploy_backend: str = "local",
    keep_serving: bool = False,
    serve_adapters: bool = False,
    served_model_name: str = "llm-finetune",
    serve_gpus: int = 1,
    namespace: str = "",
    accelerator_resource: str = "nvidia.com/gpu",
    node_selector: dict = {},
    tolerations: list = [],
    kueue_queue: str = "",
    cleanup: str = "on-success",
    wait_timeout_s: int = 0,
    training_runtime: str = "torch-distributed",
    vllm_image: str = "",
    eval_gpus: int = 0,
    eval_accelerator_type: str = "nvidia.com/gpu",
    eval_node_selector: dict = {},
    eval_tolerations: list = [],
    registry_address: str = "",
    stall_timeout_s: float = 1800.0,
    deploy_all_trials: bool = False,
    trials: list = [],
    select_metric: str = "fc_ast_accuracy",
    min_gain: float = 0.1,
    sweep: bool = False,
):
    """Exit 2 with one message when any parameter is invalid; in a cluster pod also refuse
    what only this machine's command line could use (local paths, launcher=local).
    `sweep`: set by the sweep pipeline, so that trials=[] typed in the UI is refused, not
    taken for a finetune run."""
    params = dict(locals())  # first statement: only the parameters are local yet
    sweep = params.pop("sweep")
    import os

    from trainer.core.errors import collect, exit_on_user_error
    from trainer.validate import (
        SWEEP_ONLY,
        on_cluster_problems,
        pipeline_problems,
        pipeline_warnings,
        registry_problems,
        sweep_problems,
    )
    from trainer.validate.objects import object_problems

    with exit_on_user_error():
        if sweep or params["trials"]:
            problems, what = sweep_problems(params), "invalid sweep parameters"
        else:
            problems = pipeline_problems({k: v for k, v in params.items() if k not in SWEEP_ONLY})
            what = "invalid pipeline parameters"
        # KUBERNETES_SERVICE_HOST is set in every pod; run_local in a notebook pod runs the tasks locally.
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("FINETUNE_RUN_LOCAL"):
            problems += on_cluster_problems(params)
        problems += registry_problems(params, problems)  # a registry that answers, now
        problems += object_problems(params)  # s3:// values in the run's bucket, one HEAD each
        for warning in pipeline_warnings(params):  # settings that would do nothing: said, not refused
            print(f"WARNING: {warning}", flush=True)
        collect(problems, what=what)
    print("parameters OK")
