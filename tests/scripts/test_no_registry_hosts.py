"""No package registry's host name anywhere in the repository: what the project fetches comes
through the machine's own clients and their configuration (`go` and its GOPROXY, pip, apt and its
sources), never from a host written into a script or a README. `go list -m -versions MODULE`,
`go list -m -f '{{.GoMod}}' MODULE@VERSION` and apt's own sources say what a hard-coded URL
would.

The names are kept here in pieces (labels), so that this file does not name them itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Package registries and their mirrors' well-known hosts, one tuple of labels each. A name also
# matches as the tail of a longer one (a subdomain of it).
REGISTRY_HOSTS = [".".join(labels) for labels in (
    # Go modules
    ("proxy", "golang", "org"), ("sum", "golang", "org"), ("index", "golang", "org"),
    ("goproxy", "io"), ("goproxy", "cn"),
    # Python
    ("pypi", "org"), ("pypi", "python", "org"), ("files", "pythonhosted", "org"),
    ("download", "pytorch", "org"), ("conda", "anaconda", "org"), ("repo", "anaconda", "com"),
    # Debian, Ubuntu, Alpine and other apt repositories
    ("deb", "debian", "org"), ("ftp", "debian", "org"), ("security", "debian", "org"),
    ("httpredir", "debian", "org"), ("snapshot", "debian", "org"), ("archive", "ubuntu", "com"),
    ("security", "ubuntu", "com"), ("ports", "ubuntu", "com"), ("dl-cdn", "alpinelinux", "org"),
    ("deb", "nodesource", "com"), ("packages", "cloud", "google", "com"),
    # JavaScript, Java, Rust, Ruby, .NET, PHP, Perl
    ("registry", "npmjs", "org"), ("registry", "yarnpkg", "com"), ("repo", "maven", "apache", "org"),
    ("repo1", "maven", "org"), ("plugins", "gradle", "org"), ("crates", "io"), ("rubygems", "org"),
    ("api", "nuget", "org"), ("repo", "packagist", "org"), ("cpan", "metacpan", "org"),
)]


def registry_hosts_in(paths: list[Path], root: Path) -> list[str]:
    """`file:line: host` for every registry host name in the given files (paths under root)."""
    pattern = re.compile(
        r"(?<![A-Za-z0-9-])(" + "|".join(re.escape(h) for h in REGISTRY_HOSTS) + r")(?![A-Za-z0-9-])",
        re.IGNORECASE)
    found = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):  # deleted but still tracked; a submodule
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in pattern.finditer(line):
                found.append(f"{path.relative_to(root)}:{number}: {match.group(1)}")
    return found


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"not a git checkout ({out.stderr.decode().strip()}): no tracked files to read")
    return [root / name for name in out.stdout.decode().split("\0") if name]


def test_no_package_registry_host_in_the_repository() -> None:
    found = registry_hosts_in(tracked_files(REPO), REPO)
    assert not found, ("package registry host names in the repository (ask the machine's own clients "
                       "instead: `go list -m`, pip, apt's sources):\n" + "\n".join(found))


def test_the_check_finds_a_host_and_says_where(tmp_path: Path) -> None:
    """The check above can fail: a name, in any case and as a subdomain's tail, is found with its
    file and line; a longer name that merely contains one, or a Go module path, is not."""
    mirror, proxy = ".".join(("deb", "debian", "org")), ".".join(("proxy", "golang", "org"))
    planted = tmp_path / "README.md"
    http, https = "http:" + "//", "https:" + "//"  # a scheme apart from the names, as above
    planted.write_text(f"intro\nmirror={http}{mirror}/debian\ncurl {https}{proxy.upper()}/k8s.io/@v/list\n"
                       f"ftp.us.{mirror}\nnot{mirror}  {mirror}s  google.golang.org/grpc\n")
    assert registry_hosts_in([planted], tmp_path) == [
        f"README.md:2: {mirror}", f"README.md:3: {proxy.upper()}", f"README.md:4: {mirror}"]
