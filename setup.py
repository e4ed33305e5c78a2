"""The SDK's compiled modules (the chain's link hash, the content walk), optional: without a C compiler
(or Cython) the SDK installs without them and takes the pure-Python functions, which give the same digests
and the same text (tests/test_linkhash.py, tests/test_content_compiled.py)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython: the pure path alone
    ext_modules = []
else:
    ext_modules = cythonize(
        [
            Extension("agentreplay_otel._linkhash", ["src/agentreplay_otel/_linkhash.pyx"]),
            Extension("agentreplay_otel._content", ["src/agentreplay_otel/_content.pyx"]),
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:  # cythonize builds new Extensions: optional is set on what it returns
        extension.optional = True

setup(ext_modules=ext_modules)
