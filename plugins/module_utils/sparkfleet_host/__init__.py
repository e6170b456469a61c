"""Code that ships to the managed hosts inside Ansible modules (AnsiballZ): stdlib only, Python 3.8+.

The controller imports the same files as the ``sparkfleet_host`` package; modules import them as
``ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host``. Imports inside this package
are relative, so both names work.
"""
