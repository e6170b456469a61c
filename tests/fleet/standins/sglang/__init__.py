"""Stand-in package for SGLang: only ``python3 -m sglang.launch_server`` (with tests/fleet/standins on PYTHONPATH),
and its version as the real package has it (python/sglang/__init__.py: ``from sglang.version import __version__``)."""

from sglang.version import __version__  # noqa: F401
