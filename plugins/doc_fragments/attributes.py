# Copyright: sparkfleet contributors
# Apache-2.0
"""Module documentation shared word for word: every module's author (sparkfleet.bench.attributes) and the
attributes of the modules that behave alike (sparkfleet.bench.attributes.<variable, lower case>)."""


class ModuleDocFragment:
    # Every module extends it. A fragment must hold options or attributes; an empty mapping merges to nothing.
    DOCUMENTATION = r"""
attributes: {}
author:
  - sparkfleet contributors (@sparkfleet)
"""

    # A module that changes the host: check mode reports the change instead of making it.
    REPORTS_CHANGES = r"""
attributes:
  check_mode:
    support: full
    description: Reports what it would change and changes nothing.
  diff_mode:
    support: none
    description: Shows no diff.
"""

    # A module that only reads the host (its platform differs from module to module).
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: It only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""
