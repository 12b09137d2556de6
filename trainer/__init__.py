import logging

# bitsandbytes (imported by peft whenever it is installed) warns at import, on CPUs with AVX-512 BF16,
# that it cannot fetch an optional kernel from the Hugging Face Hub (`kernels-community`): a line on
# every run, LoRA ones included, about a download no offline machine can make; its own fallback runs.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
