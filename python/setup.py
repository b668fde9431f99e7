"""Bundles libvkhost_capi.so into the package at build time, so `pip install ./python` gives a
self-contained install. The library comes from $VKHOST_LIB if set, else from the checkout's
target directory ($CARGO_TARGET_DIR, relative to the checkout, else target/), in release/ (built
first with cargo when it is missing and cargo is available)."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LIB = "libvkhost_capi.so"


def find_or_build_library() -> Path:
    env = os.environ.get("VKHOST_LIB")
    if env:
        return Path(env)
    # Where cargo (run from the checkout below) writes: $CARGO_TARGET_DIR, relative to its
    # working directory, else target/.
    built = HERE.parent / (os.environ.get("CARGO_TARGET_DIR") or "target") / "release" / LIB
    if not built.is_file() and shutil.which("cargo") and (HERE.parent / "Cargo.toml").is_file():
        subprocess.run(["cargo", "build", "--release", "-p", "vkhost-capi"], cwd=HERE.parent, check=True)
    if not built.is_file():
        raise SystemExit(f"{LIB} not found: build it (cargo build --release -p vkhost-capi) or set VKHOST_LIB")
    return built


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        dest = Path(self.build_lib) / "vkhost" / LIB
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(find_or_build_library(), dest)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for the platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
