"""The table core: writing, creating and committing, under the :class:`~lakelog.Table` facade.

What ``Table``, :mod:`lakelog.rowlevel`, :mod:`lakelog.maintenance`,
:mod:`lakelog.interop` and :mod:`lakelog.spark` use to change a table, in one place:

* :mod:`.commit`: the one commit path (the storage check, then a transaction), the
  commit of files already written, the commits' headers;
* :mod:`.write`: write options from table properties, writing rows as files, ``append``
  and ``overwrite`` (whole table or partitions);
* :mod:`.create`: version 0 (empty, with files written just before, or with files
  another tool wrote), and ``write_table``'s first write;
* :mod:`.properties`: properties checked against the table's columns, and their change;
* :mod:`.schema`: the schema a write goes with (``strict``, or ``merge`` evolving it);
* :mod:`.handle`: the table core every operation takes (:class:`TableHandle`, the
  protocol; :class:`TableCore`, storage plus the cached snapshot and the one commit);
* :mod:`.staged`: files written ahead of their commit, removed in exactly one place
  when the commit did not land.

Imports only below it (storage, log, scan, io, transaction), never the facade: ``Table``
holds a :class:`TableCore` and delegates to it.
"""

from .commit import Committed, commit, commit_files, commit_history, overwrite_removes
from .create import OPEN_HINT, create_with_files, declare_rules, write_new_table
from .handle import TableCore, TableHandle, delegated
from .partitions import set_partitioning
from .properties import set_properties, unset_properties, validate_properties_for
from .schema import (
    SCHEMA_MODES,
    SchemaMode,
    WritePlan,
    check_schema_mode,
    evolved_metadata,
    plan_write,
    readd_dropped,
)
from .staged import Staged, not_landed, staged
from .write import (
    WRITE_MODES,
    append,
    check_overwrite_where,
    check_write_mode,
    check_write_to,
    landed_first,
    overwrite,
    partition_scope,
    write_options_from,
    write_rows,
)

__all__ = [
    "OPEN_HINT",
    "SCHEMA_MODES",
    "WRITE_MODES",
    "Committed",
    "SchemaMode",
    "Staged",
    "TableCore",
    "TableHandle",
    "WritePlan",
    "append",
    "check_overwrite_where",
    "check_schema_mode",
    "check_write_mode",
    "check_write_to",
    "commit",
    "commit_files",
    "commit_history",
    "create_with_files",
    "declare_rules",
    "delegated",
    "evolved_metadata",
    "landed_first",
    "not_landed",
    "overwrite",
    "overwrite_removes",
    "partition_scope",
    "plan_write",
    "readd_dropped",
    "set_partitioning",
    "set_properties",
    "unset_properties",
    "staged",
    "validate_properties_for",
    "write_new_table",
    "write_options_from",
    "write_rows",
]
