"""The fine-tuning pipeline: deliver -> finetune -> evaluate -> merge -> deploy.

Run locally:  python -m pipelines.run_local [--param max_steps=100 ...]
Compile:      python -m pipelines.compile   (writes compiled/finetune.yaml)

This module only wires tasks: no I/O, cluster look-ups or random names at compile time.
The run-unique training prefix comes from the KFP run id placeholder at run time, and
credentials come from Kubernetes Secrets (names in trainer.settings), never parameters.
"""

from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import Metrics, Model

from components.deliver_dataset import deliver_dataset
from components.deliver_model import deliver_model
from components.deploy import deploy
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.not_deployed import not_deployed
from components.register import register
from components.validate_params import validate_params
from trainer import settings
from trainer.config import DEFAULT

PIPELINE_NAME = "llm-finetune"


def restricted(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """Restricted Pod Security for a KFP task's pod: non-root as the project image's user (KFP
    2.17's compiler adds no privilege escalation, all capabilities dropped, RuntimeDefault seccomp)."""
    return kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000, run_as_non_root=True)


def with_s3(task: dsl.PipelineTask) -> dsl.PipelineTask:
    """S3 credentials from the cluster Secret and the endpoint from an optional ConfigMap
    (kfp.local ignores both; run_local sets the environment itself); restricted Pod Security."""
    restricted(task)
    kubernetes.use_secret_as_env(task, secret_name=settings.get("S3_SECRET_NAME"),
                                 secret_key_to_env={"accesskey": "AWS_ACCESS_KEY_ID",
                                                    "secretkey": "AWS_SECRET_ACCESS_KEY"})
    kubernetes.use_config_map_as_env(task, config_map_name=settings.get("CONFIG_MAP_NAME"),
                                     config_map_key_to_env={"S3_ENDPOINT": "S3_ENDPOINT", "S3_BUCKET": "S3_BUCKET"},
                                     optional=True)
    return task


def on_gpus(task: dsl.PipelineTask, gpus, accelerator_type, node_selector, tolerations) -> dsl.PipelineTask:
    """Run `task` on `gpus` accelerators of `accelerator_type` on matching nodes (all pipeline
    parameters: KFP 2.17 resolves them at run time; 0 GPUs leaves the task on CPU)."""
    task.set_accelerator_type(accelerator_type).set_accelerator_limit(gpus)
    # KFP 2.17 records these two only as placeholders: inside a ParallelFor or If (the sweep) the
    # sub-DAG would not receive them ("Parent pipeline input argument ... not found"). kfp-kubernetes
    # registers its own channels the same way.
    channels = [c for c in (gpus, accelerator_type) if isinstance(c, dsl.pipeline_channel.PipelineChannel)]
    task.register_pipeline_channels(channels)
    kubernetes.add_node_selector_json(task, node_selector)
    kubernetes.add_toleration_json(task, tolerations)
    return task


def inputs_for(component, args: dict) -> dict:
    """The pipeline's own arguments that `component` takes, by name: calls built from the one
    list of names in the pipeline's signature (tests check validate-params takes them all)."""
    return {name: value for name, value in args.items() if name in component.component_spec.inputs}


def deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction, seed, chat_template,
                   after: dsl.PipelineTask | None = None) -> tuple[dsl.PipelineTask, dsl.PipelineTask]:
    """The deliver-model and deliver-dataset tasks (HF token from an optional Secret)."""
    tasks = []
    for task in (deliver_model(source=model_source, revision=model_revision, chat_template=chat_template)
                 .set_display_name("deliver model"),
                 deliver_dataset(source=dataset_source, revision=dataset_revision, eval_fraction=eval_fraction,
                                 seed=seed).set_display_name("deliver dataset")):
        kubernetes.use_secret_as_env(task, secret_name=settings.get("HF_SECRET_NAME"),
                                     secret_key_to_env={"token": "HF_TOKEN"}, optional=True)
        tasks.append(with_s3(task.after(after) if after is not None else task))
    return tasks[0], tasks[1]


@dsl.pipeline(name=PIPELINE_NAME, description="Fine-tune a Hugging Face model with LoRA, evaluate base vs "
              "tuned, merge, and serve it behind an OpenAI-compatible API.")
def finetune_pipeline(
    model_source: str = "builtin:tiny-llama",
    model_revision: str = "",
    chat_template: str = "model",
    dataset_source: str = "builtin:function-calling",
    dataset_revision: str = "",
    eval_fraction: float = 0.1,
    launcher: str = "local",
    nodes: int = 2,
    procs_per_node: int = 1,
    method: str = DEFAULT.method,
    lora_r: int = DEFAULT.lora_r,
    lora_alpha: int = DEFAULT.lora_alpha,
    lora_dropout: float = DEFAULT.lora_dropout,
    lora_train_embeddings: bool = DEFAULT.lora_train_embeddings,
    learning_rate: float = DEFAULT.learning_rate,
    max_steps: int = DEFAULT.max_steps,
    batch_size: int = DEFAULT.batch_size,
    batch_tokens: int = DEFAULT.batch_tokens,
    tokens_per_step: int = DEFAULT.tokens_per_step,
    gradient_checkpointing: bool = DEFAULT.gradient_checkpointing,
    compile: bool = DEFAULT.compile,
    max_seq_len: int = DEFAULT.max_seq_len,
    seed: int = DEFAULT.seed,
    checkpoint_every: int = DEFAULT.checkpoint_every,
    max_restarts: int = 2,
    eval_max_rows: int = 200,
    eval_engine: str = "auto",
    min_fc_accuracy: float = 0.0,
    min_gain: float = 0.0,
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
    stall_timeout_s: float = DEFAULT.stall_timeout_s,
) -> NamedTuple("Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str):
    """Defaults run the built-in tiny model and dataset (offline, about a minute on 2 CPU cores).

    For a pretrained model set lora_train_embeddings=False and a learning rate near 2e-4. A real model on a laptop
    CPU (README: "Fine-tune a real model on a laptop"): model_source=<SmolLM2-135M-Instruct .gguf>
    chat_template=chatml-tools lora_train_embeddings=false nodes=1 learning_rate=1e-3 max_steps=60
    batch_tokens=2200 max_seq_len=640.
    On a cluster set launcher=trainjob (or pytorchjob) and deploy_backend=kubernetes (or kserve); `nodes` x
    `procs_per_node` (= GPUs per node) processes train. Every parameter is checked by the first
    step (validate-params) before anything is downloaded or started.

    Args:
        model_source: Base model: a Hugging Face Hub id (Qwen/Qwen2.5-1.5B-Instruct), an s3:// URI printed by `python
            -m trainer deliver-model`, or builtin:tiny-llama (a tiny random model for demos).
        model_revision: Hub branch, tag or commit of model_source; empty means main. Pin a commit for reproducible
            runs.
        chat_template: The chat template training, evaluation and serving all use: model (the model's own), a
            built-in name (chatml-tools: ChatML with <tool_call> JSON, for ChatML models whose own template drops
            tools, e.g. SmolLM2-Instruct), a .jinja file (run_local) or an s3:// URI of one. It is checked against the
            data before training: tools and tool calls must render and read back through the served tool parser.
        dataset_source: Chat data (rows of {"messages": [...], "tools"?: [...]} or {"prompt", "completion"}; ShareGPT
            {"conversations"} and Alpaca {"instruction", "output"} rows are converted on load; an assistant message
            with "weight": 0 is not trained on): a Hub dataset id (its default config), an s3:// URI printed by
            `python -m trainer deliver-dataset`, or builtin:function-calling; with run_local also a
            .jsonl/.json/.csv/.parquet file or a directory of train/test files.
        dataset_revision: Hub branch, tag or commit of dataset_source; empty means main.
        eval_fraction: Share of rows held out for evaluation when the data has no eval split, between 0 and 1
            (exclusive); 0.05-0.1 is typical.
        launcher: Where training runs: local (processes inside the pipeline pod, demos only), trainjob (a Kubeflow
            Trainer v2 TrainJob; use this on a current Kubeflow) or pytorchjob (Training Operator v1; old name
            kubernetes).
        nodes: Training pods (machines). 1 for models up to ~8B with LoRA; 2-4 for larger ones.
        procs_per_node: Training processes per pod, one per GPU: 8 on an 8-GPU node.
        method: lora (train small adapter matrices; the usual choice) or full (train every weight; needs several times
            the GPU memory).
        lora_r: LoRA rank, the adapter's size. 16 is a sane start for a 1-8B model; 64 for harder tasks.
        lora_alpha: LoRA scaling numerator (the update is scaled by alpha / r); usually 2 x lora_r, e.g. 32.
        lora_dropout: Dropout on the adapter input, from 0 up to (not including) 1; 0.05 for small datasets, 0
            otherwise.
        lora_train_embeddings: Also train the token embeddings. true only for the built-in random model; false for
            pretrained models.
        learning_rate: Peak learning rate (cosine decay after warm-up). About 2e-4 for LoRA on a pretrained model,
            1e-5 for full fine-tuning; 1.5e-3 suits only the built-in model (6e-3 never learned it: README). A real
            model on a laptop CPU, SmolLM2-135M-Instruct on the built-in data: 1e-3 with max_steps=60,
            batch_tokens=2200, max_seq_len=640, nodes=1, chat_template=chatml-tools (README: "Fine-tune a real
            model on a laptop").
        max_steps: Optimizer steps to train. A few hundred to a few thousand: about 2-3 passes over the data; 60 for
            SmolLM2-135M on the built-in data on a CPU.
        batch_size: Rows per process per micro-batch when batch_tokens is 0. 4-16 on one GPU.
        batch_tokens: Tokens per process per micro-batch (rows packed without padding); 0 uses batch_size rows
            instead. 16384 on an 80 GB GPU for a 1-8B model; 512 for the built-in model; 2200 (4 rows) for
            SmolLM2-135M on a CPU; must be >= max_seq_len.
        tokens_per_step: Tokens per optimizer step across all processes, reached by gradient accumulation; 0 means one
            micro-batch per step. e.g. 262144.
        gradient_checkpointing: Recompute activations in the backward pass: less GPU memory, about 30% more compute.
            true for long sequences or large models.
        compile: torch.compile each decoder layer (dynamic shapes, so new batch lengths do not recompile); the first
            step compiles (108 s for a 1B model on an H100). Steps 4-11 are then timed compiled and eager, and the
            faster runs the rest of the training (the log and metrics say which), so it never runs slower than eager
            beyond those steps. Worth trying on long GPU runs.
        max_seq_len: Longest row in tokens; longer rows are skipped and counted. 2048-4096 for chat data; at most the
            model's context length. 640 for the built-in data on a real tokenizer (its rows are 509-531 tokens once
            the five tools are rendered: 512 would skip them all).
        seed: Random seed for the data split, shuffling and initialisation, 0 to 4294967295.
        checkpoint_every: Steps between checkpoints to the bucket (one is always written at the end). Every 10-30
            minutes of training, e.g. 200.
        max_restarts: Times a failed job is restarted from its last checkpoint before the run fails; 2-3.
        eval_max_rows: Held-out rows scored for base vs tuned metrics (more rows: better estimate, longer evaluation),
            e.g. 500.
        eval_engine: How base and tuned answer the held-out rows: vllm (through vLLM's OpenAI server started as deploy
            starts it, base and adapter side by side: the score is what users get; ~1.1 s a row against HF's 5.7 on
            SmolLM2-135M, 2 CPU cores, once the server is up), hf (HF generate in the evaluate step, calls read with
            the serving tool parser), or auto (vllm where vLLM is installed, i.e. run_local, for models of 20M
            parameters and more; hf otherwise: the cluster image has no vLLM).
        min_fc_accuracy: Promotion gate: the tuned model is deployed and registered only when its function-calling
            accuracy (fc_ast_accuracy, every category, as a fraction) reaches this, e.g. 0.9; 0 asks nothing.
        min_gain: Promotion gate: ... and only when that accuracy beats the base model's by at least this (a fraction:
            0.05 is 5 points); 0 refuses only a model worse than its base. A model that fails the gate ends the run green
            with a "not promoted: ..." line, its metrics logged, nothing deployed or registered.
        deploy_backend: Where the merged model is served: local (run_local only: the cluster image has no vLLM), kubernetes
            (a vLLM Deployment and Service) or kserve (an InferenceService); one of the last two on a cluster.
        keep_serving: Leave the local server running after the smoke test (local backend only); false on a cluster.
        serve_adapters: Serve the base model as `served_model_name`-base and the LoRA adapter as `served_model_name`
            side by side (vLLM --enable-lora), to compare both through one endpoint; false serves the merged model.
            Needs method=lora and lora_train_embeddings=false.
        served_model_name: Name clients ask for (the OpenAI "model" field); on a cluster also the Deployment and
            Service name: at most 63 lowercase letters, digits and '-', starting with a letter, e.g. support-bot-v2.
        serve_gpus: GPUs for the vLLM server (tensor-parallel across them); 0 serves on CPU. 1 for models up to ~13B
            on an 80 GB GPU.
        namespace: Kubernetes namespace for the training job and the server; empty means the pipeline's own namespace.
            e.g. llm-finetune.
        accelerator_resource: Kubernetes resource name of the GPUs requested per process: nvidia.com/gpu, amd.com/gpu,
            or empty for CPU only.
        node_selector: Node labels the pods must match, as a JSON object of strings, e.g. {"nvidia.com/gpu.product":
            "NVIDIA-H100-80GB-HBM3"}; {} for any node.
        tolerations: Taints the pods tolerate, as a JSON list of Kubernetes tolerations, e.g. [{"key":
            "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]; [] for none.
        kueue_queue: Kueue LocalQueue that admits the training job and server (quota and fair sharing); empty means no
            queueing. e.g. team-a-gpus.
        cleanup: When to delete the training job after it ends: on-success (keep failed jobs for inspection), always,
            or never.
        wait_timeout_s: Seconds to wait for the training job before failing the run; 0 waits as long as it runs. e.g.
            86400 for a one-day limit.
        training_runtime: launcher=trainjob: the ClusterTrainingRuntime the TrainJob runs on: torch-distributed
            (Kubeflow Trainer's own) or llm-finetune-torch (shipped by pipelines.manifests: exit code 2 never retried).
        vllm_image: vLLM server image for deploy_backend kubernetes or kserve; empty picks vllm/vllm-openai for NVIDIA
            and AMD's rocm/vllm for amd.com/gpu. Pin a tag, e.g. vllm/vllm-openai:v0.11.0.
        eval_gpus: GPUs for the evaluate and merge-LoRA steps (batched on the GPU); 0 runs them on CPU (the demo).
            1 for models up to ~13B.
        eval_accelerator_type: Kubernetes resource name of those GPUs, e.g. nvidia.com/gpu or amd.com/gpu.
        eval_node_selector: Node labels the evaluate and merge pods must match, as a JSON object of strings, e.g.
            {"nvidia.com/gpu.product": "NVIDIA-L40S"}; {} for any node.
        eval_tolerations: Taints the evaluate and merge pods tolerate, as a JSON list of tolerations, e.g. [{"key":
            "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]; [] for none.
        registry_address: Kubeflow Model Registry REST address to register the merged model and adapter in (version =
            the run name, with lineage and metrics); empty skips registration. e.g.
            http://model-registry-service.kubeflow.svc.cluster.local:8080
        stall_timeout_s: Seconds without training progress (rank 0's step or setup stage) after which the job is
            stopped and failed, not restarted, naming the stuck stage; 0 turns the watchdog off. e.g. 1800.
    """
    args = dict(locals())  # first statement: the pipeline's own parameters, by name
    placement = dict(namespace=namespace, accelerator_resource=accelerator_resource, node_selector=node_selector,
                     tolerations=tolerations)
    checked = restricted(validate_params(**inputs_for(validate_params, args)).set_display_name("validate parameters"))
    checked.set_caching_options(False)  # local files it reads may change between runs
    model, data = deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction, seed,
                                 chat_template, after=checked)
    train = with_s3(finetune(
        base_model=model.outputs["model"], dataset=data.outputs["dataset"], run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        launcher=launcher, nodes=nodes, procs_per_node=procs_per_node, method=method, lora_r=lora_r,
        lora_alpha=lora_alpha, lora_dropout=lora_dropout, lora_train_embeddings=lora_train_embeddings,
        learning_rate=learning_rate, max_steps=max_steps, batch_size=batch_size, batch_tokens=batch_tokens,
        tokens_per_step=tokens_per_step, gradient_checkpointing=gradient_checkpointing, compile=compile,
        max_seq_len=max_seq_len, seed=seed, checkpoint_every=checkpoint_every, max_restarts=max_restarts, kueue_queue=kueue_queue, cleanup=cleanup,
        wait_timeout_s=wait_timeout_s, training_runtime=training_runtime, stall_timeout_s=stall_timeout_s,
        **placement,
    )).set_display_name("fine-tune")
    scores = with_s3(evaluate(base_model=model.outputs["model"], tuned_model=train.outputs["adapter"],
                               dataset=data.outputs["dataset"], max_rows=eval_max_rows,
                               max_seq_len=max_seq_len, eval_engine=eval_engine, min_fc_accuracy=min_fc_accuracy,
                               min_gain=min_gain)).set_display_name("evaluate")
    merged = with_s3(merge_lora(base_model=model.outputs["model"], adapter=train.outputs["adapter"]))
    merged.set_display_name("merge LoRA")
    for task in (scores, merged):
        on_gpus(task, eval_gpus, eval_accelerator_type, eval_node_selector, eval_tolerations)
    # The promotion gate (min_fc_accuracy, min_gain): deploy and register only a model that passes it;
    # otherwise the run ends green with the evaluate step's "not promoted: ..." line and no endpoint.
    with dsl.If(scores.outputs["promoted"] == True, name="promoted"):  # noqa: E712 - a KFP condition
        served = with_s3(deploy(model=merged.outputs["merged"], dataset=data.outputs["dataset"],
                                base_model=model.outputs["model"], adapter=train.outputs["adapter"],
                                serve_adapters=serve_adapters, backend=deploy_backend, keep_serving=keep_serving,
                                name=served_model_name, gpus=serve_gpus, vllm_image=vllm_image, kueue_queue=kueue_queue,
                                **placement)).set_display_name("deploy")
        with dsl.If(registry_address != "", name="registry-set"):
            registered = register(merged=merged.outputs["merged"], adapter=train.outputs["adapter"],
                                  base_model=model.outputs["model"], dataset=data.outputs["dataset"],
                                  train_metrics=train.outputs["metrics"], eval_metrics=scores.outputs["metrics"],
                                  registry_address=registry_address, model_name=served_model_name,
                                  run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
            kubernetes.use_secret_as_env(restricted(registered.set_display_name("register model")),
                                         secret_name=settings.get("REGISTRY_SECRET_NAME"),
                                         secret_key_to_env={"token": "REGISTRY_TOKEN"}, optional=True)
    with dsl.Else(name="not-promoted"):
        skipped = restricted(not_deployed(reason=scores.outputs["reason"]).set_display_name("not promoted"))
    outputs = NamedTuple("Outputs", eval_metrics=Metrics, train_metrics=Metrics, merged_model=Model, endpoint=str)
    return outputs(eval_metrics=scores.outputs["metrics"], train_metrics=train.outputs["metrics"],
                   merged_model=merged.outputs["merged"],
                   endpoint=dsl.OneOf(served.outputs["endpoint"], skipped.outputs["Output"]))
