"""The collector's compiled modules (the OTLP pass, the chain's link hash), optional: without a C compiler
(or Cython) the package installs without them and takes the pure-Python paths, which give the same rows
and digests."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython: the pure path alone
    ext_modules = []
else:
    ext_modules = cythonize(
        [
            Extension(
                "agentreplay_collector._otlpwire",
                ["src/agentreplay_collector/_otlpwire.pyx"],
            ),
            Extension(
                "agentreplay_collector._linkhash",
                ["src/agentreplay_collector/_linkhash.pyx"],
            ),
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:  # cythonize builds new Extensions: optional is set on what it returns
        extension.optional = True

setup(ext_modules=ext_modules)
