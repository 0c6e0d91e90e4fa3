"""The wheel's package list, computed rather than kept by hand.

The repository root is the import package `receipts` (pyproject.toml's package-dir maps it), so every folder
under it with an __init__.py is `receipts.<folder>`: a new subpackage ships without anyone editing a list.
Everything else (metadata, dependencies, data files) is in pyproject.toml."""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

NOT_SHIPPED = ["tests", "tests.*", "benchmarks", "benchmarks.*", "build", "build.*", "dist", "dist.*"]


class BuildPy(build_py):
    """This file sits in the package's own folder: it builds the wheel, it is not part of it."""

    def find_package_modules(self, package, package_dir):
        return [found for found in super().find_package_modules(package, package_dir)
                if (found[0], found[1]) != ("receipts", "setup")]


setup(packages=["receipts", *(f"receipts.{name}" for name in find_packages(where=".", exclude=NOT_SHIPPED))],
      cmdclass={"build_py": BuildPy})
