"""Unit tests of ``pipeaudit.timeline``."""
