"""Build the optional compiled trace scanner; everything else is in pyproject.toml.

The scanner (``pipeaudit.trace._kscan``) is ``optional``: without a C compiler the package
installs without it and decodes traces with msgspec alone (slower, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pipeaudit.trace._kscan",
            ["pipeaudit/trace/_kscan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
