"""Settings of the session disk (docs/architecture.md "Limits on hostile input", "Snapshots, rewind and fork")."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from shared.settings.area import Area


class StorageSettings(Area):
    """The session disk: its root, the workspace quotas, content blobs, snapshots and the disk probe."""

    data_dir: Path = Field(Path("./data"), validation_alias="GAMMA_DATA_DIR",
        description="Session disk root (`sessions/{sid}/...`).")
    max_file_bytes: int = Field(1024 * 1024, validation_alias="GAMMA_MAX_FILE_BYTES",
        description="Largest file one write may put (413).")
    workspace_max_bytes: int = Field(100 * 1024 * 1024, validation_alias="GAMMA_WORKSPACE_MAX_BYTES",
        description="Per-session workspace quota in bytes of regular files; a tool write or `PUT` that would grow the"
                    " workspace past it gets 507 (nothing written); for `bash` also the file-size rlimit.")
    user_disk_bytes: int = Field(5 * 1024 * 1024 * 1024, ge=0, validation_alias="GAMMA_USER_DISK_BYTES",
        description="What all of one user's sessions may take on the session disk together (workspaces, snapshots, "
                    "transcripts; by blocks, each inode once): a fork or upload past it is refused (507). 0: no budget.")
    workspace_max_files: int = Field(2000, validation_alias="GAMMA_WORKSPACE_MAX_FILES",
        description="Per-session workspace quota in non-directory entries (507 past it).")
    # Every entry counts (directories, links, FIFOs too), and nesting is bounded: what a command can
    # build is what every walk of the workspace must get through (shared/storage/walk.py).
    workspace_max_entries: int = Field(10_000, ge=1, validation_alias="GAMMA_WORKSPACE_MAX_ENTRIES",
        description="Per-session bound on entries of every kind (directories, links, FIFOs, sockets, files): a write "
                    "past it gets 507; an entry flood a `bash` call made is removed.")
    workspace_max_depth: int = Field(64, ge=1, le=512, validation_alias="GAMMA_WORKSPACE_MAX_DEPTH",
        description="Per-session bound on nesting levels: a path deeper gets 400; after a `bash` call, what nests "
                    "deeper is removed.")
    workspace_walk_budget_s: float = Field(5.0, gt=0, validation_alias="GAMMA_WORKSPACE_WALK_BUDGET_S",
        description="The longest one walk of a workspace may take (`shared/storage/walk.py`: quota checks, the change scan "
                    "around `bash`, the files projected at a wake, recursive deletes); past it the walk stops and "
                    "says so, it never fails the call or the wake.")
    disk_probe_s: float = Field(2.0, gt=0, validation_alias="GAMMA_DISK_PROBE_S",
        description="How often each service probes the session disk (`shared/serving/diskhealth.py`; `/readyz`, gauges).")
    disk_probe_timeout_s: float = Field(5.0, gt=0, validation_alias="GAMMA_DISK_PROBE_TIMEOUT_S",
        description="A disk probe slower than this counts the disk as failing (seconds).")
    disk_min_free_bytes: int = Field(1024 * 1024, ge=0, validation_alias="GAMMA_DISK_MIN_FREE_BYTES",
        description="Free bytes under which the session disk counts as full (no new lease; `/readyz` degraded).")
    blob_orphan_s: float = Field(3600.0, gt=0, validation_alias="GAMMA_BLOB_ORPHAN_S",
        description="Age after which an unclaimed content blob (its change never published) is removed (seconds).")
    snapshot_retention_s: float = Field(7 * 24 * 3600.0, gt=0, validation_alias="GAMMA_SNAPSHOT_RETENTION_S",
        description="Per session: workspace snapshots older than this are pruned (seconds); a rewind or fork to a "
                    "point before the oldest kept one is a 409 (docs/architecture.md \"Snapshots, rewind and fork\").")
    snapshot_max_bytes: int = Field(512 * 1024 * 1024, ge=1024 * 1024, validation_alias="GAMMA_SNAPSHOT_MAX_BYTES",
        description="Per session: workspace snapshots past these bytes of stored contents are pruned, oldest first "
                    "(to 80% of the limit).")
    snapshot_max_records: int = Field(2000, ge=10, validation_alias="GAMMA_SNAPSHOT_MAX_RECORDS",
        description="Per session: workspace snapshots past this many records are pruned, oldest first (to 80% of the "
                    "limit).")
