# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: one host's matrix job: the request, launch, judging, the job table, the lease and the listeners."""
