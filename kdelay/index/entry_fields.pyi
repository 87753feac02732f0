"""Type stub of entry_fields.pyx (compiled): the field numbers of an index entry."""

E_DELIVER_AFTER: int
E_BASE_OFFSET: int
E_POSITION: int
E_LAST_OFFSET_DELTA: int
E_SIZE: int
ENTRY_FIELDS: int
