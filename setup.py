"""Builds the pagoda Python package with CMake: pip install --no-build-isolation .

The native module (_pagoda) is built by the project's CMake into a build folder (PAGODA_BUILD_DIR,
default build/pip) and copied beside pagoda/__init__.py. CUDA is built when nvcc is found, as in
any other build. A folder CMake has already configured keeps its own options (it must have
PAGODA_PYTHON=ON, for the same Python); a new one is configured here. Nothing is downloaded: the
Debian packages of tools/install_deps.sh suffice."""

import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("PAGODA_BUILD_DIR", os.path.join(ROOT, "build", "pip"))
        cache = os.path.join(build, "CMakeCache.txt")
        if not os.path.exists(cache):
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                            "-DPAGODA_PYTHON=ON", "-DPAGODA_BUILD_TESTS=OFF",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        else:
            with open(cache, encoding="utf-8") as f:
                if "PAGODA_PYTHON:BOOL=ON" not in f.read().split("\n"):
                    sys.exit(f"{build} was configured without -DPAGODA_PYTHON=ON")
        subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1),
                        "--target", "_pagoda"], check=True)
        built = os.path.join(build, "python", "pagoda", os.path.basename(self.get_ext_fullpath(
            ext.name)))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.copy_file(built, target)


setup(name="pagoda",
      version="0.1.0",
      description="pagoda: an LLM inference engine (Python API)",
      packages=["pagoda"],
      package_dir={"pagoda": "python/pagoda"},
      ext_modules=[Extension("pagoda._pagoda", sources=[])],
      cmdclass={"build_ext": CMakeBuild},
      python_requires=">=3.9")
