"""pipeaudit's tests: ``unit/<layer>`` mirrors ``pipeaudit/``, ``cli/`` drives the commands,
``e2e/`` runs real processes and checks the docs; helpers live in ``support/``."""
