"""sparkfleet: benchmark a fleet of DGX Spark machines and tell whether the numbers can be trusted."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparkfleet")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"
