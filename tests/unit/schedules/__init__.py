"""Unit tests of ``pipeaudit.schedules``."""
