"""pipelines.images without building anything: the pip settings a build mounts, the cache key, the secret patterns,
and a missing podman said in one line with the fix (exit 2). make test-images builds and runs the images."""

from __future__ import annotations

import os
import subprocess
import sys

from pipelines import images


def test_the_build_gets_every_pip_setting_and_the_folders_they_name(tmp_path, monkeypatch):
    wheels, index = tmp_path / "wheels", tmp_path / "pypi" / "simple"
    wheels.mkdir()
    index.mkdir(parents=True)
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nextra-index-url = file://{index}\ntimeout = 9\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    text, mounts = images.pip_settings()
    assert f"find-links = {wheels}" in text and f"extra-index-url = file://{index}" in text and "timeout = 9" in text
    # a file:// index's pages link to ../files beside it: its parent folder is mounted
    assert str(wheels) in mounts and str(index.parent) in mounts and str(index) not in mounts


def test_the_cache_key_follows_what_the_image_copies(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "REPO", tmp_path)
    monkeypatch.setattr(images, "image_exists", lambda name: False)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM base\n")
    key = images.digest(dockerfile, {"TORCH": "torch==2.13.0+cpu"}, "base", ("pkg",))
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert images.digest(dockerfile, {"TORCH": "torch==2.13.0+cpu"}, "base", ("pkg",)) == key  # bytecode: same
    assert images.digest(dockerfile, {"TORCH": "torch==2.13.0"}, "base", ("pkg",)) != key  # the CUDA wheel
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert images.digest(dockerfile, {"TORCH": "torch==2.13.0+cpu"}, "base", ("pkg",)) != key


def test_secret_patterns_find_credentials_not_their_names():
    import re

    def hits(text):
        return [m.group(0) for p in images.SECRET_PATTERNS for m in re.finditer(p, text)]

    assert hits("ENV AWS_SECRET_ACCESS_KEY=abc123") and hits("RUN curl https://user:pw@host/x")
    assert hits("ARG x=AKIAABCDEFGHIJKLMNOP") and hits("hf_" + "x" * 34)
    # names without values, and the Dockerfile's own settings, are not credentials
    assert hits("ENV HF_HOME=/tmp/hf PIP_NO_CACHE_DIR=1") == []
    assert hits('/bin/sh -c #(nop) ARG PIP_EXTRA_INDEX_URL') == []
    assert hits("valueFrom secretKeyRef name: llm-finetune-s3 AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY") == []


def test_no_podman_is_one_line_with_the_fix_and_exit_2(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # neither podman nor runc on it
    done = subprocess.run([sys.executable, "-m", "pipelines.images", "check"], capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "podman and runc not found" in done.stderr and "apt-get install podman runc" in done.stderr
