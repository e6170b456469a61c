# Copyright: sparkfleet contributors
# Apache-2.0
"""A container image present on the host, built for its architecture, for native rootfs extraction: the
rootfs_image module's work (:func:`apply`).

Stdlib only, Python 3.8+: shipped to the hosts with the other module_utils.
"""

from __future__ import annotations

import json
import os
import platform
import tarfile
from typing import Any, Mapping

from ..task import Task, TaskFailed
from .chroot import classify_pull_error, docker_arch, image_config_from_inspect

# What check mode returns for an image it has not got yet.
EMPTY_CONFIG = {"entrypoint": [], "cmd": [], "working_dir": "", "user": ""}


class Docker:
    def __init__(self, name: str, task: Task) -> None:
        self.task = task
        path = name if os.path.isabs(name) else task.which(name)
        if not path or not os.access(path, os.X_OK):
            raise TaskFailed(f"Docker CLI '{name}' not found on this host: install Docker (docker.io or "
                             "docker-ce) or set the docker executable's path")
        self.bin = path

    def run(self, *args: str) -> tuple[int, str, str]:
        return self.task.run([self.bin, *args])

    def ping(self) -> None:
        rc, out, err = self.run("version", "--format", "{{.Server.Version}}")
        if rc != 0 or not out.strip():
            cause = err.strip() or out.strip()
            hint = " (permission denied: run as root or in the docker group)" if "permission denied" in cause.lower() \
                else ""
            raise TaskFailed(f"Docker daemon not reachable{hint}: {cause}")

    def inspect(self, ref: str) -> dict[str, Any] | None:
        rc, out, _err = self.run("image", "inspect", "--format", "{{json .}}", ref)
        if rc != 0:
            return None
        try:
            return json.loads(out)
        except ValueError:
            raise TaskFailed(f"docker image inspect {ref} printed something that is not JSON: {out[:200]}") from None


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
    return "sha256:" + (name[: -len(".json")] if name.endswith(".json") else name)


def not_there_yet(action: str, ref: str) -> dict[str, Any]:
    """Check mode's result for an image it would load or pull."""
    return dict(changed=True, action=action, image=ref, digest=None, id=None, repo_digests=[], size=0,
                architecture="", os="", host_architecture=docker_arch(platform.machine()), env=[], **EMPTY_CONFIG)


def archive_entry(archive: str, ref: str | None) -> dict[str, Any]:
    """The manifest entry of the image ``ref`` in the ``docker save`` archive (the only one when ``ref`` is None
    or the archive holds one image)."""
    if not os.path.isfile(archive):
        raise TaskFailed(f"image archive {archive} does not exist on this host")
    try:
        manifest = archive_manifest(archive)
    except (OSError, ValueError, tarfile.TarError) as exc:
        raise TaskFailed(f"cannot read image archive {archive}: {exc}") from None
    if ref:
        entries = [e for e in manifest if ref in (e.get("RepoTags") or [])]
        if not entries and len(manifest) == 1:
            entries = manifest
        if not entries:
            tags = [t for e in manifest for t in (e.get("RepoTags") or [])]
            held = tags or "untagged images"
            raise TaskFailed(f"image archive {archive} does not hold {ref} (it holds {held})")
    else:
        if len(manifest) != 1:
            raise TaskFailed(f"image archive {archive} holds {len(manifest)} images: name one with image")
        entries = manifest
    return entries[0]


def apply(params: Mapping[str, Any], task: Task) -> dict[str, Any]:
    """The rootfs_image module's result: the image found, loaded from its archive or pulled, and its config."""
    p = params
    ref: str | None = p["image"] or None
    docker = Docker(p["docker"], task)
    docker.ping()
    action = "present"
    info = docker.inspect(ref) if ref else None

    if info is None and p["archive"]:
        archive = p["archive"]
        image_id = config_id(archive_entry(archive, ref))
        info = docker.inspect(image_id)
        if info is None:
            if task.check_mode:
                return not_there_yet("would load", ref or "")
            rc, out, err = docker.run("load", "-i", archive)
            if rc != 0:
                raise TaskFailed(f"docker load -i {archive} failed: {(err or out).strip()}")
            action = "loaded"
            info = docker.inspect(image_id)
            if info is None:
                raise TaskFailed(f"docker load -i {archive} succeeded but image {image_id} is not there")
        if ref and ref not in (info.get("RepoTags") or []) and docker.inspect(ref) is None and not task.check_mode:
            docker.run("tag", info["Id"], ref)  # an untagged archive entry: give it the name the campaign uses
        ref = ref or ((info.get("RepoTags") or [None])[0]) or info["Id"]

    if info is None:
        assert ref is not None
        if p["offline"]:
            raise TaskFailed(f"image {ref} is not present and offline mode forbids pulling it: load it with "
                             "an image archive (docker save) or allow pulling")
        if task.check_mode:
            return not_there_yet("would pull", ref)
        rc, out, err = docker.run("pull", "--quiet", ref)
        if rc != 0:
            cause = classify_pull_error(err + out)
            raise TaskFailed(f"cannot pull image {ref}: {cause}: {(err or out).strip()}")
        action = "pulled"
        info = docker.inspect(ref)
        if info is None:
            raise TaskFailed(f"docker pull {ref} succeeded but the image cannot be inspected")

    assert info is not None and ref is not None
    host_arch = docker_arch(platform.machine())
    image_arch = info.get("Architecture") or ""
    image_os = info.get("Os") or ""
    if p["check_architecture"] and (image_os != "linux" or docker_arch(image_arch) != host_arch):
        variant = "/" + info["Variant"] if info.get("Variant") else ""
        raise TaskFailed(
            f"image {ref} is built for {image_os}/{image_arch}{variant}"
            f" but this host is linux/{host_arch} ({platform.machine()}): use an image for linux/{host_arch}",
            architecture=image_arch, host_architecture=host_arch)
    config = info.get("Config") or {}
    return dict(
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
