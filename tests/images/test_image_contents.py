"""What the images hold: no credential in a layer, the environment or a label (pipelines.images.secret_findings,
which make images runs after every build; proven on a planted image), and a HOME the images' user 1000 can write."""

from __future__ import annotations

import pytest

from pipelines import images
from trainer.core import settings

pytestmark = pytest.mark.images


@pytest.mark.parametrize("name", [settings.image(), settings.get("EVAL_IMAGE")])
def test_no_image_layer_holds_a_credential(name, s3_env):
    # the test's own S3 keys are this machine's credentials too: they reach containers only as environment
    known = images.machine_credentials() + [s3_env["AWS_SECRET_ACCESS_KEY"]]
    assert images.secret_findings(name, known) == []
    env = images.podman("image", "inspect", "--format", "{{json .Config.Env}}", name).stdout
    assert "AWS_" not in env and "HF_TOKEN" not in env and "S3_ENDPOINT" not in env


def test_a_planted_credential_is_found(tmp_path):
    key = "hf_" + "a1B2c3D4" * 5
    (tmp_path / "Containerfile").write_text(
        f"FROM {images.PYTHON_BASE}\nENV AWS_SECRET_ACCESS_KEY=planted-secret-value\nRUN echo {key} > /dev/null\n"
    )
    name = "localhost/llm-finetune-test/planted:1"
    images.podman("build", "--pull=never", "-t", name, str(tmp_path))
    try:
        found = images.secret_findings(name, ["a-known-value-1234"])
        assert any(": env holds" in f for f in found) and any(": layer holds" in f for f in found), found
        assert all("planted-secret-value" not in f and key not in f for f in found)  # masked in the message
    finally:
        images.podman("rmi", "--force", name, check=False)


@pytest.mark.parametrize("name", [settings.image(), settings.get("EVAL_IMAGE")])
def test_the_images_user_writes_its_home(name):
    done = images.podman(
        "run", "--rm", "--network=host", "--entrypoint=", name, "sh", "-c",
        'id -u; echo "$HOME"; find "$HOME" -mindepth 1 ! -writable | head -5; '
        "python -c 'import matplotlib.pyplot' 2>&1",
    )  # fmt: skip
    uid, home, *rest = done.stdout.splitlines()
    assert uid == "1000" and home == "/tmp"
    assert rest == [], rest  # nothing under HOME it cannot write, and matplotlib finds its config folder
