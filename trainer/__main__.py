"""python -m trainer {train,deliver-model,deliver-dataset,evaluate,merge,serve,download,launch-k8s,deploy-k8s,...}

The trainer's command line: every stage of the pipeline without KFP. S3 settings and
credentials come from the environment (S3_ENDPOINT, S3_BUCKET, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY).

  python -m trainer.recipe.torchrun --nproc-per-node 2 -m trainer train --model-uri s3://... \\
      --dataset-uri s3://... --output-prefix runs/try1   # the same prefix again resumes
  python -m trainer deliver-model builtin:tiny-llama
  python -m trainer build-tiny-model ./tiny-model   # a local model directory to try
  python -m trainer serve ./merged-model --served-model-name my-model --port 8000
  python -m trainer launch-k8s --dry-run --nodes 2 --procs-per-node 8 --model-uri s3://... ...
  python -m trainer deploy-k8s --dry-run --name my-model --model-uri s3://...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.store import delivery
from trainer.models import model_tree
from trainer.config import sources
from trainer.chat import templates
from trainer.config.training import TrainConfig
from trainer.data import load, masking, quiet_conversions
from trainer.data import name_masking as name_masking_mod
from trainer.core.errors import UserError, collect, exit_on_user_error
from trainer.config.params import BY_NAME, add_train_arguments
from trainer.core.storage import Store, split_uri
from trainer.chat.templates import describe, spec_problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.arguments(sub.add_parser(name, help=command.help, description=command.description))
    args = parser.parse_args(argv)

    with exit_on_user_error():
        COMMANDS[args.command].run(args)


@dataclass(frozen=True)
class Command:
    """One command of `python -m trainer`: the function that runs it, its one-line help, its arguments."""

    run: Callable[[argparse.Namespace], None]
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    description: str | None = None


def _source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="builtin:..., a local path, an s3:// URI or a Hugging Face Hub id (README: Sources)")
    p.add_argument("--revision", default="", help="Hub branch, tag or commit (default: main)")


def _deliver_model_arguments(p: argparse.ArgumentParser) -> None:
    _source_arguments(p)
    p.add_argument(
        "--chat-template",
        default="model",
        help=f"the chat template to deliver with the model: {describe()} (default: model)",
    )


def _deliver_dataset_arguments(p: argparse.ArgumentParser) -> None:
    _source_arguments(p)
    p.add_argument(
        "--eval-fraction",
        type=float,
        default=0.1,
        help="share of rows held out for evaluation when the data has no eval split (default 0.1)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of that split (default 0)")
    p.add_argument(
        "--irrelevance-share", type=float, default=0.0, help=f"{BY_NAME['irrelevance_share'].help} (default 0)"
    )
    p.add_argument(
        "--irrelevance-distractors",
        type=float,
        default=0.0,
        help=f"{BY_NAME['irrelevance_distractors'].help} (default 0)",
    )
    p.add_argument("--name-masking", type=float, default=0.0, help=f"{BY_NAME['name_masking'].help} (default 0)")
    p.add_argument(
        "--irrelevance-reply",
        default=BY_NAME["irrelevance_reply"].default,
        help=f"{BY_NAME['irrelevance_reply'].help} (default %(default)r)",
    )


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-uri", required=True, help="the base model (s3:// URI from deliver-model)")
    p.add_argument("--tuned-uri", required=True, help="the adapter or fully tuned model (s3:// URI from train)")
    p.add_argument(
        "--dataset-uri", required=True, help="the dataset (s3:// URI from deliver-dataset); its eval.jsonl is scored"
    )
    p.add_argument("--max-rows", type=int, default=200, help="score at most this many eval rows (default 200)")
    p.add_argument(
        "--max-seq-len",
        type=int,
        default=512,
        help="rows longer than this many tokens are skipped and counted, as in training (default 512)",
    )


def _merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-uri", required=True, help="the base model (s3:// URI)")
    p.add_argument("--adapter-uri", required=True, help="the LoRA adapter (s3:// URI from train)")
    p.add_argument("--out", required=True, help="directory for the merged model")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", type=Path, help="a Hugging Face model directory (e.g. a merged model)")
    p.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to accept connections from other machines")
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument("--served-model-name", default="", help="the `model` clients ask for (default: the directory name)")
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        metavar="NAME=ADAPTER_DIR",
        help="also serve a LoRA adapter of this model under NAME (repeatable)",
    )
    p.add_argument("--log", type=Path, default=None, help="vLLM's log file (default: a new temporary file)")


def _download_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("uri", help="s3:// URI of a delivered tree")
    p.add_argument("out", type=Path, help="local directory to write it to")


def _launch_k8s_arguments(p: argparse.ArgumentParser) -> None:
    add_train_arguments(p)
    _cluster_arguments(p)
    p.add_argument(
        "--launcher",
        default="pytorchjob",
        choices=("pytorchjob", "kubernetes", "trainjob"),
        help="the Training Operator's PyTorchJob (kubernetes is the same) or Kubeflow Trainer's TrainJob",
    )
    p.add_argument("--training-runtime", default="torch-distributed", help="trainjob: ClusterTrainingRuntime")
    p.add_argument("--run-id", default="manual", help="names the job and its objects (default: manual)")


def _deploy_k8s_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="Deployment/Service name; also the served model name")
    p.add_argument("--model-uri", required=True, help="the merged (or base) model, s3:// URI")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per replica; > 1 = tensor parallel")
    p.add_argument(
        "--backend",
        default="kubernetes",
        choices=("kubernetes", "kserve", "llmisvc"),
        help="kubernetes: a vLLM Deployment and Service; kserve: an InferenceService; llmisvc: an "
        "LLMInferenceService (default kubernetes)",
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=S3_URI",
        help="serve this LoRA adapter beside the base model (--model-uri) under NAME; repeatable",
    )
    p.add_argument("--max-lora-rank", type=int, default=16, help="vLLM --max-lora-rank: at least the adapters' r")
    p.add_argument(
        "--vllm-image",
        default="",
        help="default: per accelerator (settings VLLM_IMAGE / VLLM_ROCM_IMAGE / VLLM_CPU_IMAGE)",
    )
    p.add_argument(
        "--tool-call-parser",
        default="hermes",
        help="vLLM's parser for the model's tool-call format: hermes (<tool_call>, the built-in model, "
        "Qwen), llama3_json (Llama 3.x), mistral; the pipeline reads it off the chat template",
    )
    _cluster_arguments(p)


def _build_tiny_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", type=Path, help="directory to write the model and tokenizer to")


def _cluster_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the Kubernetes objects as YAML, create nothing")
    p.add_argument(
        "--namespace", default="", help="default: this pod's namespace, else the kubeconfig context's, else default"
    )
    p.add_argument("--nodes", type=int, default=1, help="training pods (default 1)")
    p.add_argument("--procs-per-node", type=int, default=1, help="processes (GPUs) per pod (default 1)")
    p.add_argument(
        "--accelerator-resource",
        default="nvidia.com/gpu",
        help="resource name requested per GPU (default nvidia.com/gpu)",
    )
    p.add_argument("--node-selector", type=json.loads, default={}, help='JSON, e.g. {"pool": "h100"}')
    p.add_argument("--tolerations", type=json.loads, default=[], help="JSON list of tolerations")
    p.add_argument("--queue", default="", help="Kueue LocalQueue")
    p.add_argument(
        "--cleanup", default="on-success", help="delete the job's objects: on-success (default), always or never"
    )


def _cluster_spec(args: argparse.Namespace):
    from trainer.k8s.podspec import ClusterSpec

    return ClusterSpec(
        namespace=args.namespace,
        nodes=args.nodes,
        procs_per_node=args.procs_per_node,
        accelerator_resource=args.accelerator_resource,
        node_selector=args.node_selector,
        tolerations=args.tolerations,
        queue=args.queue,
        cleanup=args.cleanup,
        training_runtime=getattr(args, "training_runtime", "torch-distributed"),
    )


def print_yaml(objects) -> None:
    import yaml

    from trainer.k8s.lifecycle import to_dict

    print(yaml.safe_dump_all([to_dict(o) for o in objects], sort_keys=False), end="")


def reach_cluster(timeout: float = 10.0) -> None:
    """One bounded request to the API server before launch-k8s / deploy-k8s create anything, so
    that an unreachable or untrusted cluster is one line in seconds, not a urllib3 traceback
    after the kubernetes client's retries."""
    import copy

    from kubernetes import client as k
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from trainer.k8s.lifecycle import api_client

    configuration = copy.copy(api_client().configuration)
    configuration.retries = False  # one try: urllib3's default 3 retries would multiply the limit
    api = k.ApiClient(configuration)
    try:
        # (connect, read): the client ignores a float, and a server that accepts but never answers
        # would hold this forever
        k.VersionApi(api).get_code(_request_timeout=(timeout, timeout))
    except ApiException as err:  # it answered: an expired or refused token, or no permission
        raise UserError(
            f"the Kubernetes API server at {configuration.host} refused the request ({err.status} "
            f"{err.reason}): refresh the kubeconfig's credentials (e.g. `kubectl get nodes` to "
            "re-authenticate) or check KUBECONFIG"
        ) from None
    except (HTTPError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise UserError(
            f"cannot reach the Kubernetes API server at {configuration.host} ({str(reason)[:200]}) "
            f"within {timeout:.0f}s: check KUBECONFIG and `kubectl get nodes`, or add --dry-run to "
            "print the objects instead"
        ) from None


def cmd_train(args: argparse.Namespace) -> None:
    cfg = TrainConfig.from_namespace(args).validate()  # before importing torch: bad input fails in a second
    import signal

    from trainer.models.model import skip_bitsandbytes

    skip_bitsandbytes(cfg.method)
    from trainer.core.exitcodes import retry_transient_failures
    from trainer.recipe.shutdown import sigterm_exit
    from trainer.recipe.train import train

    # What the recipe's own handler hands back to when it ends: without it, a SIGTERM in the
    # instant after the run committed its result killed the process (status 143, retried).
    signal.signal(signal.SIGTERM, sigterm_exit)
    with retry_transient_failures():  # S3 or a peer gone: a status that restarts the job (trainer.core.exitcodes)
        # The chat template against the rows, as the pipeline's launch checks them (and records it: not again
        # here). Every rank, so that each refuses at once: one left waiting at the rendezvous stopped only
        # when torchrun's grace ran out (37 s).
        from trainer import parity

        parity.check_delivered(Store.from_env(), cfg.model_uri, cfg.dataset_uri, cfg.output_prefix)
        train(cfg)


def cmd_launch_k8s(args: argparse.Namespace) -> None:
    from trainer.k8s.podspec import job_name
    from trainer.launch import launcher
    from trainer.validate.cluster import environment_image_problems

    cfg, spec = TrainConfig.from_namespace(args), _cluster_spec(args)
    # FINETUNE_IMAGE="x:v1 --privileged" was rendered as it was here, where submit refused it
    collect(
        cfg.problems() + spec.problems() + environment_image_problems(), what="invalid training or cluster settings"
    )
    name = job_name(args.run_id)
    job = launcher(args.launcher, spec, cfg.stall_timeout_s)
    if args.dry_run:
        print_yaml(job.build(cfg.to_args(), name))
    else:
        reach_cluster()
        job.run(cfg.to_args(), name)


def cmd_deploy_k8s(args: argparse.Namespace) -> None:
    from trainer import deploy
    from trainer.deploy.base import ServeSpec, parse_adapters

    spec = ServeSpec(
        name=args.name,
        model_uri=args.model_uri,
        gpus=args.gpus,
        cluster=_cluster_spec(args),
        adapters=parse_adapters(args.adapter),
        max_lora_rank=args.max_lora_rank,
        vllm_image=args.vllm_image,
        tool_call_parser=args.tool_call_parser,
    )
    from trainer.validate.cluster import environment_image_problems

    collect(environment_image_problems(), what="invalid image settings")  # the init container runs FINETUNE_IMAGE
    objects = deploy.backend(args.backend).build(spec)  # the settings' problems first; contacts nothing
    if args.dry_run:
        print_yaml(objects)
    else:
        reach_cluster()
        # No store: the flags (--max-lora-rank, --tool-call-parser) are the settings the pipeline reads off it.
        out = deploy.deploy(args.backend, spec, None, [{"role": "user", "content": "Hello!"}])
        print(json.dumps(out.as_dict(), indent=1))


def cmd_build_tiny_model(args: argparse.Namespace) -> None:
    from trainer.models import builtin_model

    try:
        held = sorted(p.name for p in args.out.iterdir()) if args.out.is_dir() else []
        if held:  # the user's files: build would replace their config.json, weights and tokenizer
            raise UserError(
                f"{args.out} is not empty (it holds {', '.join(held[:4])}"
                f"{', ...' if len(held) > 4 else ''}): build-tiny-model writes config.json, "
                "model.safetensors and the tokenizer there; give a new or empty directory"
            )
        print(builtin_model.build(args.out))
    except OSError as err:  # a path that cannot be created or written: the user's to fix
        raise UserError(
            f"cannot write the tiny model to {args.out}: {err.strerror or err}; pass a writable directory"
        ) from None


def cmd_serve(args: argparse.Namespace) -> None:
    from trainer.serving import local

    sys.exit(
        local.serve_forever(
            args.model_dir, args.served_model_name, host=args.host, port=args.port, loras=args.lora, log_path=args.log
        )
    )


def cmd_deliver(args: argparse.Namespace) -> None:
    """deliver-model, deliver-dataset: a local source's problems and missing S3 settings in one message, not
    one per attempt."""
    problems = _local_source_problems(
        args.command.removeprefix("deliver-"),
        args.source,
        getattr(args, "eval_fraction", 0.1),
        getattr(args, "seed", 0),
        getattr(args, "chat_template", templates.MODEL),
        getattr(args, "irrelevance_share", 0.0),
        getattr(args, "irrelevance_reply", masking.IRRELEVANCE_REPLY),
        getattr(args, "irrelevance_distractors", 0.0),
        getattr(args, "name_masking", 0.0),
    )
    if args.command == "deliver-model":
        problems += [p.replace("chat_template", "--chat-template", 1) for p in spec_problems(args.chat_template)]
    store = _store(problems, what=f"cannot {args.command} {args.source}")
    deliver = delivery.deliver_model if args.command == "deliver-model" else delivery.deliver_dataset
    split = (
        {
            "eval_fraction": args.eval_fraction,
            "seed": args.seed,
            "irrelevance_share": args.irrelevance_share,
            "irrelevance_reply": args.irrelevance_reply,
            "irrelevance_distractors": args.irrelevance_distractors,
            "name_masking": args.name_masking,
        }
        if args.command == "deliver-dataset"
        else {"chat_template": args.chat_template}
    )
    uri, meta = deliver(args.source, args.revision, store, **split)
    print(json.dumps({"uri": uri, **{k: v for k, v in meta.items() if k != "files"}}, indent=1))


def cmd_evaluate(args: argparse.Namespace) -> None:
    store = _store(_uri_problems(args), what=f"cannot {args.command}")  # before torch loads: bad input in 0.1 s
    from trainer.evaluate import evaluate
    from trainer.models.model import skip_bitsandbytes

    tuned = store.get_tree(args.tuned_uri)
    skip_bitsandbytes(adapter_dir=tuned)
    result = evaluate(
        store.get_tree(args.model_uri),
        tuned,
        store.get_tree(args.dataset_uri) / "eval.jsonl",
        max_rows=args.max_rows,
        max_seq_len=args.max_seq_len,
    )
    print(json.dumps(result, indent=1))


def cmd_download(args: argparse.Namespace) -> None:
    store = _store(_uri_problems(args), what=f"cannot {args.command}")
    print(store.get_tree(args.uri, args.out))


def cmd_merge(args: argparse.Namespace) -> None:
    store = _store(_uri_problems(args), what=f"cannot {args.command}")  # before torch loads: bad input in 0.1 s
    from trainer.models.merge import input_problems, merge
    from trainer.models.model import skip_bitsandbytes
    from trainer.models.weights import adapter_fit_problems

    adapter = store.get_tree(args.adapter_uri)
    collect(input_problems(None, adapter, args.model_uri, args.adapter_uri), what="cannot merge")
    model = store.get_tree(args.model_uri)  # the large one second: a wrong adapter is said before it downloads
    collect(
        input_problems(model, adapter, args.model_uri, args.adapter_uri)
        or adapter_fit_problems(model, adapter, args.adapter_uri),
        what="cannot merge",
    )
    skip_bitsandbytes(adapter_dir=adapter)
    print(merge(model, adapter, args.out))


# litgpt's shape: one function per command; main() builds each command's arguments from here and calls it.
COMMANDS = {
    "train": Command(
        cmd_train,
        "fine-tune (run under torchrun for DDP)",
        add_train_arguments,
        "Fine-tune a delivered model on a delivered dataset; under torchrun every process trains "
        "(DDP), rank 0 logs, checkpoints and writes <output-prefix>/result.json.",
    ),
    "deliver-model": Command(cmd_deliver, "put a model into the bucket, print its URI", _deliver_model_arguments),
    "deliver-dataset": Command(cmd_deliver, "put a dataset into the bucket, print its URI", _deliver_dataset_arguments),
    "evaluate": Command(cmd_evaluate, "base vs tuned metrics", _evaluate_arguments),
    "merge": Command(cmd_merge, "merge a LoRA adapter into its base", _merge_arguments),
    "serve": Command(cmd_serve, "serve a local model directory with vLLM's OpenAI-compatible server", _serve_arguments),
    "download": Command(cmd_download, "download a tree from the bucket (checksums verified)", _download_arguments),
    "launch-k8s": Command(
        cmd_launch_k8s, "run training as a PyTorchJob or TrainJob (--dry-run prints it)", _launch_k8s_arguments
    ),
    "deploy-k8s": Command(
        cmd_deploy_k8s, "serve a merged model with vLLM (--dry-run prints the objects)", _deploy_k8s_arguments
    ),
    "build-tiny-model": Command(
        cmd_build_tiny_model, "write builtin:tiny-llama to a directory", _build_tiny_model_arguments
    ),
}


def _uri_problems(args: argparse.Namespace) -> list[str]:
    """evaluate, download, merge: every URI and count checked, to be said in one message with the S3 settings'."""
    problems = []
    for flag in ("model_uri", "tuned_uri", "dataset_uri", "adapter_uri", "uri"):
        try:
            split_uri(getattr(args, flag, None) or "s3://ok")
        except UserError:
            problems.append(
                f"{'--' + flag.replace('_', '-') if flag != 'uri' else 'URI'} "
                f"{getattr(args, flag)!r} is not an s3:// URI: pass the s3://bucket/... URI that "
                "deliver-model, deliver-dataset or train printed"
            )
    return problems + [
        f"--{flag.replace('_', '-')} {getattr(args, flag)}: give a whole number of at least 1"
        for flag in ("max_rows", "max_seq_len")
        if getattr(args, flag, 1) < 1
    ]


def _store(problems: list[str], what: str) -> Store:
    """The bucket from the S3 settings, after every problem found so far and the settings' own in one UserError."""
    try:
        store = Store.from_env()
    except UserError as err:
        problems.append(str(err))
    collect(problems, what=what)
    return store


def _local_source_problems(
    what: str,
    source: str,
    eval_fraction: float = 0.1,
    seed: int = 0,
    chat_template: str = templates.MODEL,
    irrelevance_share: float = 0.0,
    irrelevance_reply: str = masking.IRRELEVANCE_REPLY,
    irrelevance_distractors: float = 0.0,
    name_masking: float = 0.0,
) -> list[str]:
    """What is wrong with a source on this machine (cheap to check fully); [] for other kinds,
    which deliver checks as it fetches them."""
    problems = []
    if what == "dataset" and not 0 < eval_fraction < 1:
        problems.append(f"--eval-fraction must be between 0 and 1 (exclusive), got {eval_fraction}: e.g. 0.1")
        eval_fraction = 0.1  # still check the source itself, so every problem is reported at once
    if what == "dataset" and (share := masking.share_problem(irrelevance_share, "--irrelevance-share")):
        problems.append(share)
        irrelevance_share = 0.0
    if what == "dataset" and (reply := masking.reply_problem(irrelevance_reply, "--irrelevance-reply")):
        problems.append(reply)
    if what == "dataset" and (bad := masking.distractors_problem(irrelevance_distractors, "--irrelevance-distractors")):
        problems.append(bad)
    if what == "dataset" and (bad := name_masking_mod.share_problem(name_masking, "--name-masking")):
        problems.append(bad)
        name_masking = 0.0
    try:
        src = sources.parse(source, what)
        if src.kind == "local" and what == "model":
            return problems + model_tree.model_dir_problems(
                src.ref, own_template=templates.resolves_to_model(chat_template)
            )
        if src.kind == "local":
            with quiet_conversions():  # checked only: the delivery that follows says what it converts, once
                splits = load(src, "", eval_fraction, seed)
            if refused := masking.data_problem(splits, irrelevance_share, f"dataset {src.ref}", "--irrelevance-share"):
                problems.append(refused)
            if refused := name_masking_mod.data_problem(splits, name_masking, f"dataset {src.ref}", "--name-masking"):
                problems.append(refused)
    except UserError as err:
        return problems + [str(err)]
    return problems


if __name__ == "__main__":
    main()
