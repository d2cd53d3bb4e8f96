"""Maps the top-level code folders onto the ``kubellm`` namespace.

``runtime/`` -> ``kubellm.runtime``, ``operator/`` -> ``kubellm.operator``,
``kernels/`` -> ``kubellm.kernels``; subpackages are discovered so that a new folder
needs no edit here. Everything else about the distribution is in pyproject.toml.
"""
from setuptools import find_packages, setup

FOLDERS = {"kubellm": "kubellm", "runtime": "kubellm.runtime",
           "operator": "kubellm.operator", "kernels": "kubellm.kernels"}

packages, package_dir = [], {}
for folder, name in FOLDERS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir,
      package_data={"kubellm.operator": ["*.yaml"]})
