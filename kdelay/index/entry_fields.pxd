# cython: language_level=3
# The fields of a DeliverAfterIndex entry by number, defined once: compiled code indexes an
# entry's five int64s (and an index's five columns) with them, and Python reads them as
# entry_fields' ints (index/entry.py's Entry holds its fields in this order).
cpdef enum:
    E_DELIVER_AFTER, E_BASE_OFFSET, E_POSITION, E_LAST_OFFSET_DELTA, E_SIZE, ENTRY_FIELDS
