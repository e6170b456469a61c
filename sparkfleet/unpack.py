"""Names of the staging directories collect's unpack leaves under ``results/<campaign>/<host>/`` while it works.

The unpack itself is the collection's ``sparkfleet.bench.results_unpack`` action (plugins/plugin_utils/unpack.py,
which defines the same names; a unit test keeps the two equal). What lies in a staging directory is a copy being
moved into place, or left by an interrupted unpack: never results. ``sparkfleet.load`` skips them and names them
as leftovers.
"""

from __future__ import annotations

#: The current staging prefix, and the ``tempfile`` prefix earlier versions used.
STAGING_PREFIX = ".sparkfleet-staging-"
STAGING_PREFIXES = (STAGING_PREFIX, ".unpack-")
