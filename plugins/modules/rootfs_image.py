#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache-2.0
"""Ansible module: make sure a container image is present on the host, for native rootfs extraction; the work is
sparkfleet_host.rootfs.rootfs_image."""

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
seealso:
  - module: sparkfleet.bench.rootfs_extract
extends_documentation_fragment:
  - sparkfleet.bench.attributes
  - sparkfleet.bench.attributes.reports_changes
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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import task
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs import rootfs_image


def main() -> None:
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
    task.exit_with(module, rootfs_image.apply)


if __name__ == "__main__":
    main()
