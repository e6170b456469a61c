# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: the native environment: the image's root file system (extracted,
an image store, an overlay), its mounts and the chroot launcher."""
