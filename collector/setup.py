"""The collector's compiled OTLP pass, optional: without a C compiler (or Cython) the package installs
without it and takes the pure-Python path, which gives the same rows. (The chain's link hash is compiled
with the SDK: ``agentreplay_otel._linkhash``.)"""

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
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:  # cythonize builds new Extensions: optional is set on what it returns
        extension.optional = True

setup(ext_modules=ext_modules)
