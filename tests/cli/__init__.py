"""The ``pipeaudit`` commands driven through click's runner (and a few real subprocesses)."""
