"""python -m trainer.serving.vllm_server --model DIR [vLLM's other server arguments]

vLLM's OpenAI server (what `python -m vllm.entrypoints.openai.api_server` runs, the same arguments),
each of its processes tied to the one that started it: the kernel sends it SIGKILL when that one
dies, however it died (trainer.core.procs.die_with_parent; Linux, elsewhere this is vLLM's server alone).

trainer.serving.local runs it under trainer.core.procs' guard, which takes vLLM's tree down when it is
signalled, when vLLM exits, or when `trainer serve` is gone. A guard killed with SIGKILL runs nothing,
though, and a user's `kill -9` of what looks hung takes the guard and vLLM's API server alike: vLLM's
EngineCore, a child of the API server with no watch of its own on it, then spun on under init at
~130% CPU with nobody to answer (its process title, VLLM::EngineCore, overwrites its command line and
environment). Tied, the API server dies with the guard and the EngineCore with the API server (gone
0.2 s after the SIGKILLs, a request running, on 2 cores: the API server's own exit;
tests/integration/test_procs.py).
"""

from trainer.core.procs import die_with_parent

if __name__ in ("__main__", "__mp_main__"):
    # The API server ties itself here, as __main__. multiprocessing's spawn (vLLM's start method for the
    # EngineCore on CPU, or once CUDA is initialised) runs the parent's main module in the child, as
    # __mp_main__, before the child's target: the EngineCore ties itself here too, to the API server. A
    # fork (vLLM's default elsewhere) is tied by die_with_parent's hook. A mere import ties nothing.
    die_with_parent()


def main() -> None:
    # vLLM's own entry point for `python -m vllm.entrypoints.openai.api_server`, called rather than run with
    # runpy: runpy would make vLLM's module __main__, and spawned children would run it instead of this one.
    from vllm.entrypoints.launchers.api_server.entry import main as serve

    serve()


if __name__ == "__main__":
    main()
