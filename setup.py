"""The SDK's compiled link hash, optional: without a C compiler (or Cython) the SDK installs without it
and hashes with the pure-Python function, which gives the same digests (tests/test_linkhash.py)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython: the pure path alone
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("agentreplay_otel._linkhash", ["src/agentreplay_otel/_linkhash.pyx"])],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:  # cythonize builds new Extensions: optional is set on what it returns
        extension.optional = True

setup(ext_modules=ext_modules)
