# Copyright: sparkfleet contributors
# Apache-2.0
"""Host code: the record contract: its fields, the record, the ledger,
the atomic writer, what resumes and what is reused."""
