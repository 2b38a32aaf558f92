"""The handler's window index, read and written by :mod:`pipeaudit.trace.window_index` (the
format belongs to the trace layer, where every command's window discovery reads it); these
names stay here for the handler and its worker."""

from __future__ import annotations

from pipeaudit.trace.window_index import (
    AUDIT_FILE,
    INDEX_DIR,
    LOG_FILE,
    Entry,
    read_entries,
    step_of_folder,
    window_folder,
    window_folders,
    write_entry,
)

__all__ = ["AUDIT_FILE", "INDEX_DIR", "LOG_FILE", "Entry", "read_entries", "step_of_folder",
           "window_folder", "window_folders", "write_entry"]
