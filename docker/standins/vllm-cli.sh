#!/bin/sh
# `vllm serve ARGS` for the stand-in vLLM CPU image (vllm-cpu.Containerfile says why): the OpenAI server module,
# which takes the same arguments (the project passes the model as --model).
if [ "$1" = serve ]; then shift; exec python -m vllm.entrypoints.openai.api_server "$@"; fi
echo "vllm (stand-in of the CPU image): only 'vllm serve ...' is provided; got: $*" >&2
exit 2
