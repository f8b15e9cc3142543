"""Which file system a path is on (mountinfo), and which of them are network file systems."""

from __future__ import annotations

from pathlib import Path

from alpha_rl.tracking.mounts import filesystem_of, is_network, network_filesystem


def mountinfo(tmp_path: Path, mounts: list[tuple[str, str]]) -> Path:
    """A /proc/self/mountinfo with (mount point, type) lines, in order."""
    lines = [f"{20 + i} 1 0:{30 + i} / {point} rw,relatime - {kind} src{i} rw"
             for i, (point, kind) in enumerate(mounts)]  # fmt: skip
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_longest_mount_point_holding_the_path_decides(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "lab" / "runs").mkdir(parents=True)
    mounts = [("/", "ext4"), (str(shared), "nfs4"), (str(shared / "lab"), "ext4")]
    info = mountinfo(tmp_path, mounts)
    assert filesystem_of(shared / "mlflow.db", info) == "nfs4"  # a file not yet created
    assert network_filesystem(shared / "x" / "y" / "mlflow.db", info) == "nfs4"
    assert filesystem_of(shared / "lab" / "runs", info) == "ext4"
    assert network_filesystem(shared / "lab" / "runs", info) is None
    # a sibling whose name merely starts like the mount point is not inside it
    (tmp_path / "shared2").mkdir()
    assert filesystem_of(tmp_path / "shared2", info) == "ext4"


def test_a_later_mount_on_the_same_point_is_the_one_on_top(tmp_path: Path) -> None:
    info = mountinfo(tmp_path, [("/", "ext4"), (str(tmp_path), "tmpfs"), (str(tmp_path), "lustre")])
    assert network_filesystem(tmp_path / "mlflow.db", info) == "lustre"


def test_escaped_mount_points_are_read(tmp_path: Path) -> None:
    spaced = tmp_path / "lab share"
    spaced.mkdir()
    info = tmp_path / "mountinfo"
    escaped = str(spaced).replace(" ", "\\040")
    info.write_text(f"20 1 0:30 / / rw - ext4 a rw\n21 1 0:31 / {escaped} rw - cifs b rw\n")
    assert network_filesystem(spaced / "mlflow.db", info) == "cifs"


def test_network_types_and_fuse_by_name() -> None:
    for kind in ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "ceph", "fuse.sshfs",
                 "fuse.s3fs", "fuse.glusterfs"):  # fmt: skip
        assert is_network(kind), kind
    for kind in ("ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "fuse.portal", None):
        assert not is_network(kind), kind


def test_no_mountinfo_means_unknown(tmp_path: Path) -> None:
    assert filesystem_of(tmp_path, tmp_path / "absent") is None
    assert network_filesystem(tmp_path, tmp_path / "absent") is None
