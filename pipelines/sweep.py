"""The sweep pipeline: several LoRA trials in parallel, the best one merged and deployed only
when it beats the base model by a margin.

Run locally:  python -m pipelines.run_local --pipeline sweep [--parallelism 2] [--param trials='[...]']
Compile:      python -m pipelines.compile   (writes compiled/sweep.yaml with parallelism 2)

validate -> deliver model + dataset -> ParallelFor(trials): finetune + evaluate
-> pick_best (dsl.Collected metrics and adapters) -> If(deploy): merge + deploy
                                                   Else: not_deployed (says why)

Each trial dict sets lora_r, lora_alpha and learning_rate; every other setting is shared.
Trials write to runs/<task id>/ (the KFP task id placeholder), so their checkpoints and
PyTorchJobs never collide. Metric names are the same in every trial and every run, so the
KFP Compare view lines them up. KFP fixes ParallelFor's parallelism at compile time: build
another with `build(parallelism)` (run_local --parallelism N does).
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Markdown, Metrics

from components.deploy import deploy
from components.deploy_trials import deploy_trials
from components.evaluate import evaluate
from components.finetune import finetune
from components.merge_lora import merge_lora
from components.not_deployed import not_deployed
from components.pick_best import pick_best
from components.validate_params import validate_params
from pipelines.finetune import deliver_inputs, inputs_for, on_gpus, restricted, with_s3
from trainer.config import DEFAULT

SWEEP_NAME = "llm-finetune-sweep"
# Around the finetune demo's learning rate (1.5e-3), at the demo's 650 steps: on 2 cores the
# built-in data gave 96% / 86% / 99% function-calling accuracy (300 steps at 3e-3 / 3e-3 / 1e-3:
# 62% / 26% / 54%), so the sweep's pick means something.
DEFAULT_TRIALS = [
    {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003},
    {"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0015},
    {"lora_r": 64, "lora_alpha": 64, "learning_rate": 0.001},
]


def build(parallelism: int = 2):
    """The sweep pipeline with `parallelism` trials running at once."""

    @dsl.pipeline(name=SWEEP_NAME, description="LoRA hyperparameter sweep: parallel trials, the best deployed "
                  "only if it beats the base model by min_gain.")
    def sweep_pipeline(
        trials: list = DEFAULT_TRIALS,
        select_metric: str = "fc_accuracy",
        min_gain: float = 0.1,
        min_fc_accuracy: float = 0.0,
        model_source: str = "builtin:tiny-llama",
        model_revision: str = "",
        chat_template: str = "model",
        dataset_source: str = "builtin:function-calling",
        dataset_revision: str = "",
        eval_fraction: float = 0.1,
        launcher: str = "local",
        nodes: int = 1,
        procs_per_node: int = 1,
        namespace: str = "",
        accelerator_resource: str = "nvidia.com/gpu",
        node_selector: dict = {},
        tolerations: list = [],
        lora_dropout: float = DEFAULT.lora_dropout,
        lora_train_embeddings: bool = DEFAULT.lora_train_embeddings,
        max_steps: int = DEFAULT.max_steps,
        batch_tokens: int = 1024,  # not DEFAULT's 512: the measured sweep (README) packs 1,024 tokens
        max_seq_len: int = DEFAULT.max_seq_len,
        seed: int = DEFAULT.seed,
        max_restarts: int = 2,
        eval_max_rows: int = 100,
        eval_engine: str = "auto",
        deploy_backend: str = "local",
        keep_serving: bool = False,
        served_model_name: str = "llm-finetune",
        deploy_all_trials: bool = False,
        checkpoint_every: int = DEFAULT.checkpoint_every,
        gradient_checkpointing: bool = DEFAULT.gradient_checkpointing,
        compile: bool = DEFAULT.compile,
        kueue_queue: str = "",
        cleanup: str = "on-success",
        wait_timeout_s: int = 0,
        training_runtime: str = "torch-distributed",
        stall_timeout_s: float = DEFAULT.stall_timeout_s,
        serve_gpus: int = 1,
        vllm_image: str = "",
        eval_gpus: int = 0,
        eval_accelerator_type: str = "nvidia.com/gpu",
        eval_node_selector: dict = {},
        eval_tolerations: list = [],
    ) -> NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str):
        """LoRA trials in parallel; the best one is merged and deployed only if it beats the base model.

        Args:
            trials: JSON list of trials, each exactly {"lora_r": int, "lora_alpha": int, "learning_rate": float}, e.g.
                [{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.0002}, {"lora_r": 64, "lora_alpha": 128,
                "learning_rate": 0.0001}]. Numbers without quotes.
            select_metric: Metric that picks the best trial: fc_accuracy (function-calling accuracy, higher is better)
                or eval_loss (lower is better).
            min_gain: Least improvement over the base model, in the metric's own units, for the best trial to be
                deployed: e.g. 0.05 (5 points of accuracy) or 0.1 (eval loss).
            min_fc_accuracy: The finetune pipeline's promotion gate: the best trial is deployed only when its
                function-calling accuracy (fc_ast_accuracy, a fraction) reaches this, e.g. 0.9; 0 asks nothing.
            model_source: Base model: a Hugging Face Hub id (Qwen/Qwen2.5-1.5B-Instruct), an s3:// URI printed by
                `python -m trainer deliver-model`, or builtin:tiny-llama (a tiny random model for demos).
            model_revision: Hub branch, tag or commit of model_source; empty means main. Pin a commit for reproducible
                runs.
            chat_template: The chat template training, evaluation and serving all use: model (the model's own), a
                built-in name (chatml-tools: ChatML with <tool_call> JSON, for ChatML models whose own template drops
                tools, e.g. SmolLM2-Instruct), a .jinja file (run_local) or an s3:// URI of one. It is checked against the
                data before training: tools and tool calls must render and read back through the served tool parser.
            dataset_source: Chat data (rows of {"messages": [...], "tools"?: [...]} or {"prompt", "completion"};
                ShareGPT {"conversations"} and Alpaca {"instruction", "output"} rows are converted on load; an
                assistant message with "weight": 0 is not trained on): a Hub dataset id (its default config), an s3://
                URI printed by `python -m trainer deliver-dataset`, or builtin:function-calling; with run_local also a
                .jsonl/.json/.csv/.parquet file or a directory of train/test files.
            dataset_revision: Hub branch, tag or commit of dataset_source; empty means main.
            eval_fraction: Share of rows held out for evaluation when the data has no eval split, between 0 and 1
                (exclusive); 0.05-0.1 is typical.
            launcher: Where each trial trains: local (processes inside the pipeline pod, demos only) or kubernetes (a
                PyTorchJob per trial; use this on a cluster).
            nodes: Training pods (machines) per trial; 1 for models up to ~8B with LoRA.
            procs_per_node: Training processes per pod, one per GPU: 8 on an 8-GPU node.
            namespace: Kubernetes namespace for the trials' training jobs and the server; empty means the pipeline's
                own namespace. e.g. llm-finetune.
            accelerator_resource: Kubernetes resource name of the GPUs requested per process: nvidia.com/gpu,
                amd.com/gpu, or empty for CPU only.
            node_selector: Node labels the pods must match, as a JSON object of strings, e.g.
                {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}; {} for any node.
            tolerations: Taints the pods tolerate, as a JSON list of Kubernetes tolerations, e.g. [{"key":
                "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]; [] for none.
            lora_dropout: Dropout on the adapter input, from 0 up to (not including) 1; 0.05 for small datasets, 0
                otherwise.
            lora_train_embeddings: Also train the token embeddings. true only for the built-in random model; false for
                pretrained models.
            max_steps: Optimizer steps per trial. A few hundred to a few thousand: about 2-3 passes over the data.
            batch_tokens: Tokens per process per micro-batch (rows packed without padding); 0 uses 16 rows instead.
                16384 on an 80 GB GPU for a 1-8B model; must be >= max_seq_len.
            max_seq_len: Longest row in tokens; longer rows are skipped and counted. 2048-4096 for chat data; at most
                the model's context length.
            seed: Random seed for the data split, shuffling and initialisation (the same in every trial), 0 to
                4294967295.
            max_restarts: Times a failed trial is restarted from its last checkpoint before it fails; 2-3.
            eval_max_rows: Held-out rows scored per trial for base vs tuned metrics, e.g. 500.
            eval_engine: How base and tuned answer the held-out rows: vllm (through vLLM's OpenAI server started as
                deploy starts it, base and adapter side by side: the score is what users get; ~1.1 s a row against
                HF's 5.7 on SmolLM2-135M, 2 CPU cores, once the server is up), hf (HF generate in the evaluate step,
                calls read with the serving tool parser), or auto (vllm where vLLM is installed, i.e. run_local, for
                models of 20M parameters and more; hf otherwise: the cluster image has no vLLM).
            deploy_backend: Where the winner is served: local (run_local only: the cluster image has no vLLM), kubernetes
                (a vLLM Deployment and Service) or kserve (an InferenceService); one of the last two on a cluster.
            keep_serving: Leave the local server running after the smoke test (local backend only); false on a
                cluster.
            served_model_name: Name clients ask for (the OpenAI "model" field); on a cluster also the Deployment and
                Service name: at most 63 lowercase letters, digits and '-', starting with a letter, e.g.
                support-bot-v2.
            deploy_all_trials: Also serve every trial's adapter side by side on one base model (`served_model_name`-base
                and `served_model_name`-trial-0, -1, ...), to compare the trials through one endpoint by model name;
                false serves only the winner.
            checkpoint_every: Steps between each trial's checkpoints to the bucket (one is always written at the end).
                Every 10-30 minutes of training, e.g. 200.
            gradient_checkpointing: Recompute activations in the backward pass: less GPU memory, about 30% more
                compute. true for long sequences or large models.
            compile: torch.compile each decoder layer; the first step compiles, then steps 4-11 are timed compiled and
                eager and the faster runs the rest (see the finetune pipeline). Worth trying on long GPU runs.
            kueue_queue: Kueue LocalQueue that admits the trials' training jobs and the server (quota and fair
                sharing); empty means no queueing. e.g. team-a-gpus.
            cleanup: When to delete a trial's training job after it ends: on-success (keep failed jobs for
                inspection), always, or never.
            wait_timeout_s: Seconds to wait for each trial's training job before failing it; 0 waits as long as it
                runs. e.g. 86400 for a one-day limit.
            training_runtime: launcher=trainjob: the ClusterTrainingRuntime the trials' TrainJobs run on:
                torch-distributed (Kubeflow Trainer's own) or llm-finetune-torch (shipped by pipelines.manifests).
            stall_timeout_s: Seconds without training progress (rank 0's step or setup stage) after which a trial's job
                is stopped and failed, not restarted, naming the stuck stage; 0 turns the watchdog off. e.g. 1800.
            serve_gpus: GPUs for the vLLM server of the winner (and of deploy_all_trials), tensor-parallel across
                them; 0 serves on CPU. 1 for models up to ~13B on an 80 GB GPU.
            vllm_image: vLLM server image for deploy_backend kubernetes or kserve; empty picks vllm/vllm-openai for
                NVIDIA and AMD's rocm/vllm for amd.com/gpu. Pin a tag, e.g. vllm/vllm-openai:v0.11.0.
            eval_gpus: GPUs for each trial's evaluate step and the winner's merge (batched on the GPU); 0 runs them
                on CPU (the demo). 1 for models up to ~13B.
            eval_accelerator_type: Kubernetes resource name of those GPUs, e.g. nvidia.com/gpu or amd.com/gpu.
            eval_node_selector: Node labels the evaluate and merge pods must match, as a JSON object of strings, e.g.
                {"nvidia.com/gpu.product": "NVIDIA-L40S"}; {} for any node.
            eval_tolerations: Taints the evaluate and merge pods tolerate, as a JSON list of tolerations, e.g.
                [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]; [] for none.
        """
        args = dict(locals())  # first statement: the pipeline's own parameters, by name
        placement = dict(namespace=namespace, accelerator_resource=accelerator_resource, node_selector=node_selector,
                         tolerations=tolerations)
        checked = restricted(validate_params(**inputs_for(validate_params, args), sweep=True)
                             .set_display_name("validate parameters"))
        checked.set_caching_options(False)  # local files it reads may change between runs
        model, data = deliver_inputs(model_source, model_revision, dataset_source, dataset_revision, eval_fraction,
                                     seed, chat_template, after=checked)
        with dsl.ParallelFor(trials, parallelism=parallelism) as trial:
            # Every shared setting by name, as the finetune pipeline passes them; the trial's own on top.
            train = with_s3(finetune(
                base_model=model.outputs["model"], dataset=data.outputs["dataset"],
                run_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, **inputs_for(finetune, args),
                lora_r=trial.lora_r, lora_alpha=trial.lora_alpha, learning_rate=trial.learning_rate)
            ).set_display_name("trial: fine-tune")
            scores = with_s3(evaluate(base_model=model.outputs["model"], tuned_model=train.outputs["adapter"],
                                      dataset=data.outputs["dataset"], max_rows=eval_max_rows,
                                      max_seq_len=max_seq_len, eval_engine=eval_engine)).set_display_name("trial: evaluate")
            on_gpus(scores, eval_gpus, eval_accelerator_type, eval_node_selector, eval_tolerations)
        best = restricted(pick_best(trials=trials, trial_metrics=dsl.Collected(scores.outputs["metrics"]),
                                    adapters=dsl.Collected(train.outputs["adapter"]), select_metric=select_metric,
                                    min_gain=min_gain, min_fc_accuracy=min_fc_accuracy).set_display_name("pick best"))
        # KFP 2.17 cannot compile dsl.Collected inside a condition, so this task always runs and
        # returns at once unless deploy_all_trials is set.
        with_s3(deploy_trials(enabled=deploy_all_trials, base_model=model.outputs["model"],
                              adapters=dsl.Collected(train.outputs["adapter"]), dataset=data.outputs["dataset"],
                              backend=deploy_backend, name=served_model_name, gpus=serve_gpus, vllm_image=vllm_image,
                              kueue_queue=kueue_queue, **placement)
                ).set_display_name("deploy all trials side by side")
        with dsl.If(best.outputs["deploy"] == True, name="beats-base"):  # noqa: E712 - a KFP condition
            merged = with_s3(merge_lora(base_model=model.outputs["model"], adapter=best.outputs["best_adapter"]))
            on_gpus(merged.set_display_name("merge LoRA"), eval_gpus, eval_accelerator_type, eval_node_selector,
                    eval_tolerations)
            with_s3(deploy(model=merged.outputs["merged"], dataset=data.outputs["dataset"], backend=deploy_backend,
                           keep_serving=keep_serving, name=served_model_name, gpus=serve_gpus, vllm_image=vllm_image,
                           kueue_queue=kueue_queue, **placement)
                    ).set_display_name("deploy")
        with dsl.Else(name="not-good-enough"):
            restricted(not_deployed(reason=best.outputs["reason"]).set_display_name("not deployed"))
        outputs = NamedTuple("Outputs", best_metrics=Metrics, summary=Markdown, decision=str)
        return outputs(best_metrics=best.outputs["best_metrics"], summary=best.outputs["summary"],
                       decision=best.outputs["reason"])

    return sweep_pipeline


sweep_pipeline = build()
