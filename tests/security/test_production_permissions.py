"""Attack (issue 31, item 5): ``agentreplay init --production DIR`` over a folder others can open.

A DIR made beforehand 0755 or 0777 stayed so, and ``--validate`` said nothing was insecure: another
local user copied the store (every agent's recorded prompts, tool arguments and results) or swapped in
an ``admin.token`` of their own, which the collector then obeyed. Now ``init`` makes DIR and what it
writes or reuses in it (keys/, log/, manifests/, the store's whole tree) owner-only and says each path
it changed; it refuses, naming each path and changing nothing, what it cannot make safe: a folder or
file another user owns, a link where it writes, a folder above DIR others may write. ``--validate``
names each path of a config that others may read (the store), write or replace.

Everything through the real CLI, as in test_production_init.py. Another user is ``nobody``: the tests
that hand a file to them need root (else they are skipped).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
NOBODY = 65534
as_root = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="hands files to another user: root")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


def clean_env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTREPLAY_"))}
    return base | {"PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}"}


def agentreplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "agentreplay"), *args], env=clean_env(), capture_output=True, text=True,
                          timeout=120)


def init(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return agentreplay("init", "--production", str(directory), "--host", "127.0.0.1", "--listen", "127.0.0.1", *args)


def validate(directory: Path) -> subprocess.CompletedProcess[str]:
    return agentreplay("init", "--validate", str(directory / "otel-collector.yaml"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout + done.stderr).replace("\n", " ")


def chdb_like_store(store: Path) -> list[Path]:
    """A store as chDB leaves it: folders 0755, files 0644, its tables links to its folders."""
    (store / "store" / "ab1" / "part").mkdir(parents=True)
    (store / "data" / "agentreplay").mkdir(parents=True)
    (store / "metadata").mkdir()
    files = [store / "store" / "ab1" / "part" / "data.bin", store / "metadata" / "agentreplay.sql"]
    for f in files:
        f.write_text("every agent's prompts and tool arguments")
        f.chmod(0o644)
    (store / "data" / "agentreplay" / "otel_traces").symlink_to("../../store/ab1", target_is_directory=True)
    for folder in (store, *(p for p in store.rglob("*") if p.is_dir() and not p.is_symlink())):
        folder.chmod(0o755)
    return files


def assert_owner_only(target: Path) -> None:
    for folder in ("", "keys", "log", "manifests", "store"):
        assert mode(target / folder) == 0o700, folder
    for secret in ("keys/org.key", "admin.token", "log/log.key"):
        assert mode(target / secret) == 0o600, secret
    for public in ("keys/org.pub", "log/log.cert.json", "otel-collector.yaml"):
        assert not mode(target / public) & 0o022, public


@pytest.mark.parametrize("made", [0o755, 0o777, 0o750])
def test_a_folder_made_open_beforehand_is_made_owner_only_and_said(tmp_path: Path, made: int) -> None:
    target = tmp_path / "ar"
    target.mkdir()
    target.chmod(made)
    done = init(target)
    assert done.returncode == 0, done.stderr
    assert f"secured {target}: mode {made:04o}" in done.stdout and "now 0700" in done.stdout, done.stdout
    assert_owner_only(target)
    checked = validate(target)
    assert checked.returncode == 0 and "nothing insecure" in checked.stdout, said(checked)


def test_a_new_folder_needs_nothing_secured(tmp_path: Path) -> None:
    done = init(tmp_path / "ar")
    assert done.returncode == 0 and "secured" not in done.stdout, said(done)
    assert_owner_only(tmp_path / "ar")


def test_a_reused_store_is_made_owner_only_to_its_last_file(tmp_path: Path) -> None:
    """A store an earlier collector left open: each folder 0700 and each file 0600 (a file once open may
    have been hard-linked elsewhere: its own mode is what keeps it), each said; the engine's links kept."""
    target = tmp_path / "ar"
    target.mkdir(mode=0o700)
    files = chdb_like_store(target / "store")
    link = target / "store" / "data" / "agentreplay" / "otel_traces"
    done = init(target)
    assert done.returncode == 0, done.stderr
    assert f"secured {target / 'store'}: mode 0755: others may read and enter it; now 0700" in done.stdout
    for f in files:
        assert mode(f) == 0o600 and f"secured {f}: mode 0644: others may read it; now 0600" in done.stdout, f
    for folder in (p for p in (target / "store").rglob("*") if p.is_dir() and not p.is_symlink()):
        assert mode(folder) == 0o700, folder
    assert link.is_symlink() and os.readlink(link) == "../../store/ab1"
    assert validate(target).returncode == 0


@as_root
def test_a_folder_another_user_owns_is_refused_and_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "ar"
    target.mkdir(mode=0o777)
    target.chmod(0o777)
    os.chown(target, NOBODY, NOBODY)
    done = init(target)
    assert done.returncode == 2, said(done)
    assert f"{target}: owned by uid {NOBODY}" in said(done) and "Nothing was written or changed" in said(done)
    assert list(target.iterdir()) == [] and mode(target) == 0o777


@as_root
@pytest.mark.parametrize("planted", ["admin.token", "keys/org.key", "store/metadata/agentreplay.sql", "keys"])
def test_a_file_another_user_planted_is_refused(tmp_path: Path, planted: str) -> None:
    """Another user's file where init writes (with --force, which replaces files) or in the reused store:
    refused, nothing replaced, the folder not even made private (nothing changes)."""
    target = tmp_path / "ar"
    assert init(target).returncode == 0
    target.chmod(0o755)
    chdb_like_store(target / "store")
    os.chown(target / planted, NOBODY, NOBODY)
    org_key = (target / "keys" / "org.key").read_bytes()
    done = init(target, "--force")
    assert done.returncode == 2, said(done)
    assert f"{target / planted}: owned by uid {NOBODY}" in said(done), said(done)
    assert (target / "keys" / "org.key").read_bytes() == org_key and mode(target) == 0o755


def test_a_link_where_init_writes_is_refused(tmp_path: Path) -> None:
    """admin.token a link to a file others read: --force would have written the token through it."""
    target = tmp_path / "ar"
    assert init(target).returncode == 0
    elsewhere = tmp_path / "public.txt"
    elsewhere.write_text("")
    elsewhere.chmod(0o644)
    (target / "admin.token").unlink()
    (target / "admin.token").symlink_to(elsewhere)
    done = init(target, "--force")
    assert done.returncode == 2 and f"{target / 'admin.token'}: a symbolic link" in said(done), said(done)
    assert elsewhere.read_text() == ""


@pytest.mark.parametrize("parent_mode, refused", [(0o777, True), (0o775, True), (0o1777, False), (0o755, False)])
def test_a_folder_above_that_others_may_write_is_refused(tmp_path: Path, parent_mode: int, refused: bool) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(parent_mode)
    done = init(parent / "ar")
    if refused:
        assert done.returncode == 2, said(done)
        assert f"{parent}: above {parent / 'ar'}, mode {parent_mode:04o}: others may write it" in said(done)
        assert not (parent / "ar").exists()
    else:  # sticky (as /tmp): others cannot rename or remove what is not theirs in it
        assert done.returncode == 0, said(done)


def test_validate_names_each_path_others_may_read_write_or_replace(tmp_path: Path) -> None:
    target = tmp_path / "ar"
    assert init(target).returncode == 0
    clean = validate(target)
    assert clean.returncode == 0, said(clean)
    files = chdb_like_store(target / "store")  # the store as an older collector left it: 0755
    files[0].chmod(0o666)
    (target / "manifests").chmod(0o777)
    (target / "otel-collector.yaml").chmod(0o666)
    target.chmod(0o777)  # anyone may replace admin.token, the config, the keys' folder
    checked = validate(target)
    assert checked.returncode == 1, said(checked)
    lines = [line for line in checked.stdout.splitlines() if line.startswith("insecure: ")]
    expected = {
        f"config: {target / 'otel-collector.yaml'}: mode 0666: others may write it",
        f"config: {target}: above {target / 'otel-collector.yaml'}, mode 0777: others may write it",
        f"processors.agentreplay_scope.manifests_dir: {target / 'manifests'}: mode 0777: others may write it",
        f"exporters.clickhouse.endpoint: {target / 'store'}: mode 0755: others may read and enter it",
        f"exporters.clickhouse.endpoint: {files[0]}: mode 0666: others may read and write it",
    }
    for line in expected:
        assert any(line in found for found in lines), (line, lines)
    assert len(lines) == len({line.split(": ", 2)[2].split(":")[0] for line in lines}), lines  # each path once


@as_root
def test_validate_names_a_key_or_token_another_user_owns(tmp_path: Path) -> None:
    target = tmp_path / "ar"
    assert init(target).returncode == 0
    os.chown(target / "admin.token", NOBODY, NOBODY)
    os.chown(target / "keys", NOBODY, NOBODY)
    checked = validate(target)
    assert checked.returncode == 1, said(checked)
    assert (f"processors.agentreplay_scope.admin_token_file: {target / 'admin.token'}: owned by uid {NOBODY}"
            in checked.stdout), checked.stdout
    assert f"{target / 'keys'}: above {target / 'keys' / 'org.pub'}, owned by uid {NOBODY}" in checked.stdout
