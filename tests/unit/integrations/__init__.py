"""Unit tests of ``pipeaudit.integrations``."""
