#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: make sure a container image is present on the host, for native rootfs extraction."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rootfs_image
short_description: Ensures a container image is present and built for this host's architecture
description:
  - Looks the image up in the local Docker engine (C(docker image inspect)). When it is absent, loads it
    from O(archive) (a C(docker save) tarball) if given, else pulls it (C(docker pull)) unless O(offline)
    is set.
  - Checks that the image is a Linux image for the host's CPU architecture (C(uname -m) mapped to Docker's
    names, e.g. C(aarch64) -> C(arm64)) and fails before anything is extracted when it is not.
  - Returns what the extraction and the chroot launcher need - the image ID (RV(digest)), its size, its
    config environment (RV(env)) and what C(docker run) executes and where (RV(entrypoint), RV(cmd),
    RV(working_dir), RV(user)), so that the native launcher runs the same.
  - Idempotent - C(changed) is V(true) only when an image was pulled or loaded. An archive whose image
    ID is already present is not loaded again.
version_added: "0.1.0"
options:
  image:
    description:
      - Image reference, for example C(nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13).
      - May be omitted with O(archive) when the archive holds exactly one image.
    type: str
  archive:
    description:
      - Path on the host of an image archive written by C(docker save) (plain tar; gzip works too but is read
        twice). Used for hosts without registry access; O(image) then names the image inside it.
    type: path
  offline:
    description:
      - Never pull. An absent image (and no O(archive)) is an error.
    type: bool
    default: false
  check_architecture:
    description:
      - Fail when the image's OS/architecture is not linux/<host architecture>.
    type: bool
    default: true
  docker:
    description:
      - Name or path of the C(docker) CLI.
    type: str
    default: docker
notes:
  - Needs access to the Docker engine (root or the docker group).
  - In check mode an absent image is reported as C(changed) with RV(digest) V(null); nothing is pulled.
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: none
    description: Shows no diff.
seealso:
  - module: sparkfleet.bench.rootfs_extract
author:
  - sparkfleet contributors (@sparkfleet)
"""

EXAMPLES = r"""
- name: Make sure the TensorRT-LLM image is here (pull when absent)
  sparkfleet.bench.rootfs_image:
    image: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13
  register: native_rootfs_image_info

- name: Hosts without registry access - load a docker save tarball
  sparkfleet.bench.rootfs_image:
    image: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13
    archive: /srv/images/trtllm-spark.tar
    offline: true
"""

RETURN = r"""
image:
  description: The reference the image was found under (O(image), or the archive's tag).
  returned: always
  type: str
  sample: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13
digest:
  description: Image ID (the config digest); names the rootfs directory. V(null) in check mode when absent.
  returned: always
  type: str
  sample: sha256:2b6f1e0c4a...
id:
  description: Same as RV(digest).
  returned: always
  type: str
repo_digests:
  description: Registry manifest digests of the image (empty for imported or loaded images).
  returned: always
  type: list
  elements: str
size:
  description: Uncompressed size of the image in bytes, as the engine reports it.
  returned: always
  type: int
  sample: 18953654272
architecture:
  description: The image's architecture (Docker's name).
  returned: always
  type: str
  sample: arm64
os:
  description: The image's OS.
  returned: always
  type: str
  sample: linux
host_architecture:
  description: The host's architecture in Docker's naming.
  returned: always
  type: str
  sample: arm64
env:
  description: The image's config environment (C(Config.Env)), C(K=V) strings.
  returned: always
  type: list
  elements: str
  sample: ["PATH=/usr/local/cuda/bin:/usr/bin:/bin", "CUDA_HOME=/usr/local/cuda"]
entrypoint:
  description: The image's C(Config.Entrypoint) (empty when it has none).
  returned: always
  type: list
  elements: str
  sample: [/opt/nvidia/nvidia_entrypoint.sh]
cmd:
  description: The image's C(Config.Cmd) (what runs when C(docker run) is given no command).
  returned: always
  type: list
  elements: str
  sample: [/bin/bash]
working_dir:
  description: The image's C(Config.WorkingDir) (empty - C(/)).
  returned: always
  type: str
  sample: /workspace
user:
  description: The image's C(Config.User) (empty - root).
  returned: always
  type: str
  sample: ""
action:
  description: What was done - V(present), V(pulled), V(loaded), or in check mode V(would pull) / V(would load).
  returned: always
  type: str
  sample: present
"""

import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import tarfile  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.chroot import (  # noqa: E402
    classify_pull_error,
    docker_arch,
    image_config_from_inspect,
)

# What check mode returns for an image it has not got yet.
EMPTY_CONFIG = {"entrypoint": [], "cmd": [], "working_dir": "", "user": ""}


class Docker:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        name = module.params["docker"]
        path = name if os.path.isabs(name) else module.get_bin_path(name)
        if not path or not os.access(path, os.X_OK):
            module.fail_json(msg=f"Docker CLI '{name}' not found on this host: install Docker (docker.io or "
                                 "docker-ce) or set the docker executable's path")
        self.bin = path

    def run(self, *args: str) -> tuple[int, str, str]:
        return self.module.run_command([self.bin, *args], environ_update={"LC_ALL": "C"})

    def ping(self) -> None:
        rc, out, err = self.run("version", "--format", "{{.Server.Version}}")
        if rc != 0 or not out.strip():
            cause = err.strip() or out.strip()
            hint = " (permission denied: run as root or in the docker group)" if "permission denied" in cause.lower() \
                else ""
            self.module.fail_json(msg=f"Docker daemon not reachable{hint}: {cause}")

    def inspect(self, ref: str) -> dict[str, Any] | None:
        rc, out, _err = self.run("image", "inspect", "--format", "{{json .}}", ref)
        if rc != 0:
            return None
        try:
            return json.loads(out)
        except ValueError:
            self.module.fail_json(msg=f"docker image inspect {ref} printed something that is not JSON: {out[:200]}")
        return None


def archive_manifest(path: str) -> list[dict[str, Any]]:
    """``manifest.json`` of a ``docker save`` archive: [{Config, RepoTags, Layers}, ...]."""
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            if member.name.lstrip("./") == "manifest.json":
                fh = tar.extractfile(member)
                if fh is None:
                    break
                return json.loads(fh.read().decode())
    raise ValueError("no manifest.json in it (not a 'docker save' archive?)")


def config_id(entry: dict[str, Any]) -> str:
    """Image ID from a manifest entry's Config path (``<hex>.json`` or ``blobs/sha256/<hex>``)."""
    name = os.path.basename(entry.get("Config", ""))
    return "sha256:" + name.removesuffix(".json")


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            archive=dict(type="path"),
            offline=dict(type="bool", default=False),
            check_architecture=dict(type="bool", default=True),
            docker=dict(type="str", default="docker"),
        ),
        required_one_of=[("image", "archive")],
        supports_check_mode=True,
    )
    p = module.params
    ref: str | None = p["image"] or None
    docker = Docker(module)
    docker.ping()
    action = "present"
    info = docker.inspect(ref) if ref else None

    if info is None and p["archive"]:
        archive = p["archive"]
        if not os.path.isfile(archive):
            module.fail_json(msg=f"image archive {archive} does not exist on this host")
        try:
            manifest = archive_manifest(archive)
        except (OSError, ValueError, tarfile.TarError) as exc:
            module.fail_json(msg=f"cannot read image archive {archive}: {exc}")
        if ref:
            entries = [e for e in manifest if ref in (e.get("RepoTags") or [])]
            if not entries and len(manifest) == 1:
                entries = manifest
            if not entries:
                tags = [t for e in manifest for t in (e.get("RepoTags") or [])]
                held = tags or "untagged images"
                module.fail_json(msg=f"image archive {archive} does not hold {ref} (it holds {held})")
        else:
            if len(manifest) != 1:
                module.fail_json(msg=f"image archive {archive} holds {len(manifest)} images: name one with image")
            entries = manifest
        image_id = config_id(entries[0])
        info = docker.inspect(image_id)
        if info is None:
            if module.check_mode:
                module.exit_json(changed=True, action="would load", image=ref or "", digest=None, id=None,
                                 repo_digests=[], size=0, architecture="", os="",
                                 host_architecture=docker_arch(platform.machine()), env=[], **EMPTY_CONFIG)
            rc, out, err = docker.run("load", "-i", archive)
            if rc != 0:
                module.fail_json(msg=f"docker load -i {archive} failed: {(err or out).strip()}")
            action = "loaded"
            info = docker.inspect(image_id)
            if info is None:
                module.fail_json(msg=f"docker load -i {archive} succeeded but image {image_id} is not there")
        if ref and ref not in (info.get("RepoTags") or []) and docker.inspect(ref) is None and not module.check_mode:
            docker.run("tag", info["Id"], ref)  # an untagged archive entry: give it the name the campaign uses
        ref = ref or ((info.get("RepoTags") or [None])[0]) or info["Id"]

    if info is None:
        assert ref is not None
        if p["offline"]:
            module.fail_json(msg=f"image {ref} is not present and offline mode forbids pulling it: load it with "
                                 "an image archive (docker save) or allow pulling")
        if module.check_mode:
            module.exit_json(changed=True, action="would pull", image=ref, digest=None, id=None, repo_digests=[],
                             size=0, architecture="", os="", host_architecture=docker_arch(platform.machine()),
                             env=[], **EMPTY_CONFIG)
        rc, out, err = docker.run("pull", "--quiet", ref)
        if rc != 0:
            cause = classify_pull_error(err + out)
            module.fail_json(msg=f"cannot pull image {ref}: {cause}: {(err or out).strip()}")
        action = "pulled"
        info = docker.inspect(ref)
        if info is None:
            module.fail_json(msg=f"docker pull {ref} succeeded but the image cannot be inspected")

    assert info is not None and ref is not None
    host_arch = docker_arch(platform.machine())
    image_arch = info.get("Architecture") or ""
    image_os = info.get("Os") or ""
    if p["check_architecture"] and (image_os != "linux" or docker_arch(image_arch) != host_arch):
        variant = "/" + info["Variant"] if info.get("Variant") else ""
        module.fail_json(
            msg=f"image {ref} is built for {image_os}/{image_arch}{variant}"
                f" but this host is linux/{host_arch} ({platform.machine()}): use an image for linux/{host_arch}",
            architecture=image_arch, host_architecture=host_arch)
    config = info.get("Config") or {}
    module.exit_json(
        changed=action in ("pulled", "loaded"),
        action=action,
        image=ref,
        digest=info["Id"],
        id=info["Id"],
        repo_digests=list(info.get("RepoDigests") or []),
        size=int(info.get("Size") or 0),
        architecture=image_arch,
        os=image_os,
        host_architecture=host_arch,
        env=list(config.get("Env") or []),
        **image_config_from_inspect(config),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
