# cython: language_level=3
"""The field numbers of a DeliverAfterIndex entry (entry_fields.pxd's enum), for Python:
E_DELIVER_AFTER, E_BASE_OFFSET, E_POSITION, E_LAST_OFFSET_DELTA, E_SIZE, and ENTRY_FIELDS
(how many). index/entry.py's Entry is the entry by name; compiled code cimports these."""
