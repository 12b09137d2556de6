"""python -m pipelines  (lists the pipeline entry points; each is its own module)

  python -m pipelines.run_local [--pipeline sweep] [--param k=v ...]   run on this machine (kfp.local)
  python -m pipelines.runs list|compare|tensorboard                    past local runs side by side
  python -m pipelines.submit [--pipeline sweep] [--param k=v ...]      run on a Kubeflow Pipelines cluster
  python -m pipelines.compile                                          write compiled/*.yaml for the KFP UI
  python -m pipelines.manifests > ns.yaml                              a namespace's MinIO, Secret templates, RBAC

Each takes --help. The trainer's own stages: python -m trainer --help.
"""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = __doc__.split("\n", 1)[1].strip("\n")
    if {"-h", "--help"} & set(argv):
        print(commands)
        return 0
    print(
        f"error: python -m pipelines runs nothing itself{f' (got {argv[0]!r})' if argv else ''}; run one of:\n"
        f"{commands}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
