"""Who else may read, write or replace the collector's files: its folders, keys, token, config and store.

A key or token others can read is no longer the owner's; a file others can write, or one in a folder
others can write (or own), they can replace: their own ``admin.token`` is then obeyed. The store holds
every agent's recorded prompts, tool arguments and results. So:

- a private folder (the set-up's folder, ``keys/``, ``log/``, ``manifests/``, the store) is the owner's
  alone (0700); a secret file (a key, the admin token) too (0600); a public file (``org.pub``, the log
  key's certificate, the config) may be read but not written by others;
- each is owned by the user or by root, and is not a symbolic link (``init`` writes through none);
- no folder above it lets another user replace it: none is owned by another user, none is writable by
  others unless sticky (``/tmp``: others cannot rename what is not theirs there).

``init --production`` fixes what it can (its own file or folder, only the mode wrong) and refuses the
rest, naming each path; ``init --validate`` reports each. Group and others are treated alike: a group
may hold anyone. POSIX only: elsewhere nothing is found.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

PRIVATE_FOLDER, SECRET_FILE = 0o700, 0o600
TREE_LIMIT = 20  # paths reported of one tree (the store's may hold thousands)


class Kind(Enum):
    PRIVATE_FOLDER = "folder"  # others may neither list, enter nor write it
    SECRET_FILE = "secret"  # others may neither read nor write it
    PUBLIC_FILE = "public"  # others may read it, not write it


@dataclass(frozen=True)
class Exposed:
    """A path others may read, write or replace, why, and the mode that fixes it (None: a mode does not:
    another user owns it, it is a link, or a folder above it is open)."""

    path: Path
    why: str
    fix: int | None = None

    def line(self) -> str:
        return f"{self.path}: {self.why}"


def _posix() -> bool:
    return os.name == "posix"


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check(path: Path, kind: Kind, *, follow: bool = False) -> list[Exposed]:
    """What is wrong with ``path`` itself (nothing if it does not exist). ``follow``: a symbolic link is
    judged by what it points to (the config's paths, read by the collector) instead of refused (what
    ``init`` writes or reuses)."""
    if not _posix():
        return []
    try:
        st = path.stat() if follow else path.lstat()
    except OSError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return [Exposed(path, "a symbolic link: what it points to may be anyone's (remove it)")]
    if not _trusted(st.st_uid):
        return [Exposed(path, f"owned by {_owner(st.st_uid)}, who may change or replace it at will")]
    mode = stat.S_IMODE(st.st_mode)
    if kind is not Kind.PUBLIC_FILE:
        if mode & 0o077:
            want = PRIVATE_FOLDER if stat.S_ISDIR(st.st_mode) else SECRET_FILE
            return [Exposed(path, f"mode {mode:04o}: {_who(mode)} (should be {want:04o})", want)]
    elif mode & 0o022:
        return [Exposed(path, f"mode {mode:04o}: others may write it (should be {mode & ~0o022:04o})",
                        mode & ~0o022)]
    return []


def _who(mode: int) -> str:
    can = [word for bits, word in ((0o044, "read"), (0o022, "write"), (0o011, "enter")) if mode & bits]
    said = ", ".join(can[:-1]) + " and " + can[-1] if len(can) > 1 else "".join(can)
    return f"others may {said} it" if can else "others have rights on it"


def parents(path: Path) -> list[Exposed]:
    """Each folder above ``path`` that lets another user replace it: one owned by another user (not
    root), or one others may write that is not sticky."""
    if not _posix():
        return []
    found = []
    for folder in path.absolute().parents:
        try:
            st = folder.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if not _trusted(st.st_uid):
            found.append(Exposed(folder, f"above {path}, owned by {_owner(st.st_uid)}: they may replace what "
                                         "is below it"))
        elif mode & 0o022 and not mode & stat.S_ISVTX:
            found.append(Exposed(folder, f"above {path}, mode {mode:04o}: others may write it, so they may "
                                         "replace what is below it (chmod go-w it, or use another folder)"))
    return found


def _walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every path below ``root`` with its own status, links not followed (the store's tables are links
    to its folders)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue
        for entry in listed:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            path = Path(entry.path)
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)


def tree(root: Path, *, fixing: bool) -> list[Exposed]:
    """The store (or the incidents folder): its own folder private (0700), and everything in it owned
    by the user or root. ``fixing`` (``init``): each folder and file in it others may open is reported
    too, to be made 0700 and 0600 (a file once open may have been hard-linked elsewhere: its own mode
    is what keeps it); else (``--validate``) only what others may write inside it, as the private top
    folder keeps the rest unreachable. At most :data:`TREE_LIMIT` paths, then how many more."""
    found = check(root, Kind.PRIVATE_FOLDER)
    if not _posix() or not root.is_dir() or root.is_symlink():
        return found
    more = 0
    for path, st in _walk(root):
        exposed = _inner(path, st, fixing=fixing)
        if exposed is None:
            continue
        if len(found) < TREE_LIMIT:
            found.append(exposed)
        else:
            more += 1
    if more:
        found.append(Exposed(root, f"and {more} more paths in it like those above"))
    return found


def _inner(path: Path, st: os.stat_result, *, fixing: bool) -> Exposed | None:
    if not _trusted(st.st_uid):
        return Exposed(path, f"owned by {_owner(st.st_uid)}, who may change or replace it at will")
    if stat.S_ISLNK(st.st_mode):
        return None  # the engine's own links between its folders; their modes mean nothing
    mode = stat.S_IMODE(st.st_mode)
    want = PRIVATE_FOLDER if stat.S_ISDIR(st.st_mode) else SECRET_FILE
    if mode & 0o022 or (fixing and mode & 0o077):
        return Exposed(path, f"mode {mode:04o}: {_who(mode)} (should be {want:04o})", want)
    return None


def fix(found: list[Exposed]) -> None:
    """Set each fixable path's mode, in the order found (a folder before what is in it, so that once it
    is private nothing in it can be swapped; links are never among them: they are refused)."""
    for exposed in found:
        if exposed.fix is not None:
            os.chmod(exposed.path, exposed.fix)
