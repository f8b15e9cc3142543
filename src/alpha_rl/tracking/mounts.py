"""Which file system a path lives on, from /proc/self/mountinfo (Linux).

SQLite relies on POSIX file locks, which network file systems (NFS, SMB, Lustre, GPFS, ...) do not
honour reliably across machines: two nodes writing one database file can corrupt it or lose
writes without an error. The tracking config refuses such a store for a multi-node launcher.
"""

from __future__ import annotations

from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
# file systems whose locks are not safe for one SQLite database written from several machines
NETWORK = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "lustre", "gpfs", "beegfs",
    "glusterfs", "ceph", "ocfs2", "gfs2", "9p", "panfs", "orangefs", "pvfs2", "davfs", "cvfs",
    "wekafs", "virtiofs",
})  # fmt: skip
NETWORK_FUSE = frozenset({"sshfs", "glusterfs", "ceph", "ceph-fuse", "s3fs", "gcsfuse", "rclone",
                          "juicefs", "lizardfs", "moosefs", "mfs", "beegfs"})  # fmt: skip


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_of(path: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The type of the file system holding `path` (its nearest existing ancestor), e.g. "ext4",
    "nfs4", "fuse.sshfs"; None where mountinfo cannot be read (not Linux)."""
    try:
        lines = mountinfo.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    target = str(path.resolve())
    best, kind = -1, None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # the last mount of the longest prefix is on top
            best, kind = len(point), tail.split()[0]
    return kind


def is_network(kind: str | None) -> bool:
    """True for a network or cluster file system type (fuse.<name> by its name)."""
    if kind is None:
        return False
    base = kind.split(".", 1)[1] if kind.startswith("fuse.") else kind
    return kind in NETWORK or (kind.startswith("fuse.") and base in NETWORK_FUSE)


def network_filesystem(path: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The network file system type `path` is on, None when it is local (or unknown)."""
    kind = filesystem_of(path, mountinfo)
    return kind if is_network(kind) else None
