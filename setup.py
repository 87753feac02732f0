"""The compiled kernels (Cython): each .pyx under kdelay/ becomes a C extension module of
the same dotted name. Everything else about the package is in pyproject.toml."""

from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = sorted(Path("kdelay").rglob("*.pyx"))

setup(ext_modules=cythonize(
    [Extension(".".join(p.with_suffix("").parts), [str(p)]) for p in KERNELS],
    compiler_directives={"language_level": 3}))
