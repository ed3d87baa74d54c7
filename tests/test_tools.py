"""The scripts behind `make run` and `make test` on a fresh machine (tools/): they pick a
suitable Python and say exactly what is missing instead of failing somewhere later."""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fake_python(folder: Path, name: str, version: tuple[int, int]) -> Path:
    """An interpreter that answers the version check like a real Python of ``version``."""
    path = folder / name
    path.write_text(
        "#!/bin/sh\n"
        f"# pretends to be Python {version[0]}.{version[1]}\n"
        f'[ "$1" = -c ] && exec {sys.executable} -c "import sys; '
        f'sys.version_info = {(*version, 0, "final", 0)!r}; exec(sys.argv[1])" "$2"\n'
        "exit 0\n"
    )
    path.chmod(0o755)
    return path


def find_python(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(ROOT / "tools" / "find-python")],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )


def test_it_picks_the_first_python_of_at_least_3_11(tmp_path):
    fake_python(tmp_path, "python3", (3, 10))
    fake_python(tmp_path, "python3.12", (3, 12))
    # python3 here is a 3.10: skipped for the 3.12 beside it.
    result = find_python(f"{tmp_path}:/nonexistent")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "python3.12")


def test_it_says_what_to_install_when_no_python_is_suitable(tmp_path):
    fake_python(tmp_path, "python3", (3, 10))
    result = find_python(f"{tmp_path}:/nonexistent")
    assert result.returncode == 1
    assert "No Python 3.11 or newer on the PATH" in result.stderr
    assert "apt-get install python3 python3-venv" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the check as another user")
def test_it_names_the_missing_packages_instead_of_installing_them_without_root():
    nobody = pwd.getpwnam("nobody")
    # A PATH without redis-server; PostgreSQL is named by DATABASE_URL, so not needed.
    with tempfile.TemporaryDirectory() as folder:
        bin_dir = Path(folder)
        bin_dir.chmod(0o755)  # nobody must reach it
        for tool in ("sh", "dirname", "id", "env"):
            real = subprocess.check_output(["which", tool], text=True).strip()
            (bin_dir / tool).symlink_to(real)
        # A copy nobody can read: the checkout may sit in root's home.
        shutil.copy(ROOT / "tools" / "ensure-test-tools", bin_dir / "ensure-test-tools")
        result = run_as_nobody(bin_dir, nobody)
    assert result.returncode == 1
    assert "The tests need: redis-server" in result.stderr
    assert "apt-get install redis-server" in result.stderr


def run_as_nobody(bin_dir: Path, nobody) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(bin_dir / "ensure-test-tools")],
        env={"PATH": str(bin_dir), "DATABASE_URL": "postgres://x@127.0.0.1:1/x"},
        capture_output=True,
        text=True,
        check=False,
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
    )
