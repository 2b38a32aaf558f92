"""Conformance of the un-annotated reading: real harness runs read with their per-action spans
and without them, compared cell by cell over a grid of frameworks, schedules and shapes.

``cells`` defines the grid, ``strip`` removes the annotations, ``compare`` holds one reading to
the other and to the run's truth, ``matrix`` runs cells and renders the table. Torch is needed
only to run cells (the harness); reading and comparing import without it.
"""
