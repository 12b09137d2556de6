"""A rendered pod's container run with podman as the kubelet would run it: the same image, command, arguments,
environment (Secrets' keys resolved, the operator's variables added), user and security settings, volumes.

What a kubelet does that podman is told here: `command` replaces the image's entrypoint and `args` its command;
`capabilities.drop: [ALL]` -> --cap-drop=ALL; `allowPrivilegeEscalation: false` -> no-new-privileges;
`runAsNonRoot` is checked against the image's user (the kubelet refuses to start a root image); `fsGroup` joins
the group; a memory emptyDir at /dev/shm -> --shm-size; another emptyDir -> a fresh folder the pod's group can
write. Left out: resource requests and limits (the rendered 64Gi and GPUs are a cluster's), probes (the
serving test calls them itself). The network is the host's, with the Services' DNS names as host entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from pipelines import images

TEST_LABEL = "io.llm-finetune.test"


def size_bytes(quantity: str) -> int:
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(quantity))


def podman_args(
    container: dict,
    pod_spec: dict,
    *,
    name: str,
    env: dict[str, str] | None = None,
    secrets: dict[tuple[str, str], str] | None = None,
    field_refs: dict[str, str] | None = None,
    hosts: dict[str, str] | None = None,
    shared: dict[str, Path] | None = None,
    work: Path | None = None,
) -> list[str]:
    """`podman run` arguments (without `podman run`) for `container` of a pod with `pod_spec`; `shared`: the
    folders of the pod's volumes that several of its containers mount (an init container's download)."""
    secrets, field_refs = secrets or {}, field_refs or {}
    out = ["--rm", f"--name={name}", "--network=host", f"--label={TEST_LABEL}=1"]
    for host, address in (hosts or {}).items():
        out.append(f"--add-host={host}:{address}")
    variables: dict[str, str] = {}
    for var in container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:
            variables[var["name"]] = str(var.get("value", ""))
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            if (ref["name"], ref["key"]) in secrets:
                variables[var["name"]] = secrets[(ref["name"], ref["key"])]
            elif not ref.get("optional"):
                raise AssertionError(f"Secret {ref['name']} key {ref['key']} is not optional and not given")
        elif "fieldRef" in source:
            variables[var["name"]] = field_refs[source["fieldRef"]["fieldPath"]]
        else:
            raise AssertionError(f"env {var['name']}: {source} not emulated")
    variables.update(env or {})  # the operator's, which it sets after the user's (and a user may not set)
    out += [f"--env={k}={v}" for k, v in variables.items()]
    pod_security, security = pod_spec.get("securityContext") or {}, container.get("securityContext") or {}
    user = security.get("runAsUser", pod_security.get("runAsUser"))
    if user is not None:
        out.append(f"--user={user}")
    if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) and user is None:
        image_user = images.podman("image", "inspect", "--format", "{{.Config.User}}", container["image"]).stdout
        assert image_user.strip() not in ("", "0", "root"), (
            f"{container['image']} runs as root: runAsNonRoot refuses it"
        )
    if "ALL" in ((security.get("capabilities") or {}).get("drop") or []):
        out.append("--cap-drop=ALL")
    if security.get("allowPrivilegeEscalation") is False:
        out.append("--security-opt=no-new-privileges")
    if security.get("readOnlyRootFilesystem"):
        out.append("--read-only")
    if pod_security.get("fsGroup") is not None:
        out.append(f"--group-add={pod_security['fsGroup']}")
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        empty = volume.get("emptyDir")
        assert empty is not None, f"volume {mount['name']}: only emptyDir is emulated"
        if empty.get("medium") == "Memory" and mount["mountPath"] == "/dev/shm":
            out.append(f"--shm-size={min(size_bytes(empty.get('sizeLimit', '64Mi')), 2 << 30)}")
        else:
            folder = (shared or {}).get(mount["name"]) or Path(tempfile.mkdtemp(prefix=f"{mount['name']}-", dir=work))
            os.chmod(folder, 0o1777)  # fsGroup makes an emptyDir writable for the pod's group
            out.append(f"--volume={folder}:{mount['mountPath']}")
    if container.get("command"):
        out.append("--entrypoint=" + json.dumps(container["command"]))
    out.append(container["image"])
    out += [str(a) for a in container.get("args") or []]
    return out


def start(args: list[str], log: Path) -> subprocess.Popen:
    """`podman run ARGS` in the background, its output to `log`."""
    handle = open(log, "w")
    return subprocess.Popen(["podman", "run", *args], env=images.env(), stdout=handle, stderr=subprocess.STDOUT)


def remove_test_containers() -> None:
    listed = images.podman("ps", "--all", "--filter", f"label={TEST_LABEL}=1", "--format", "{{.ID}}").stdout.split()
    if listed:
        images.podman("rm", "--force", *listed, check=False)
