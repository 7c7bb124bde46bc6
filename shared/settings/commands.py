"""Settings of the agent's commands (services/runtime/sandbox; README "Security")."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area


class CommandSettings(Area):
    """The agent's commands: the sandbox layer and the limits of a sandboxed call."""

    sandbox: str = Field("auto", validation_alias="GAMMA_SANDBOX",
        description="Agent-command sandbox: `auto` (strongest working layer), `bwrap`, `landlock`, `off` (unconfined;"
                    " explicit only).")
    sandbox_memory_bytes: int = Field(1024 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_MEMORY_BYTES",
        description="Memory of a sandboxed command: the address space of each process, and (where a memory cgroup "
                    "per call is available, `GAMMA_SANDBOX_CGROUP`) everything the call holds at once: its processes, "
                    "page cache and tmpfs (`/tmp`, `HOME`, `/dev/shm`).")
    sandbox_cpu_s: int = Field(120, validation_alias="GAMMA_SANDBOX_CPU_S",
        description="Per process of a sandboxed command: CPU seconds.")
    sandbox_max_procs: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_PROCS",
        description="Processes of one sandboxed call.")
    sandbox_max_open_files: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_OPEN_FILES",
        description="Open files per process of a sandboxed call.")
    sandbox_tmp_bytes: int = Field(64 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_TMP_BYTES",
        description="Size of each of a sandboxed command's private `/tmp`, `HOME` and `/dev/shm` (bwrap tmpfs; under "
                    "landlock the private temporary directory, watched while the call runs).")
    sandbox_cgroup: str = Field("auto", validation_alias="GAMMA_SANDBOX_CGROUP",
        description="Where each sandboxed call gets a memory cgroup limited to `GAMMA_SANDBOX_MEMORY_BYTES`: `auto` "
                    "(the runtime's own cgroup, v1 memory hierarchy or v2 with the memory controller delegated), a "
                    "delegated cgroup directory, or `off` (tmpfs sizes and RLIMIT_AS only). A call the kernel kills at the "
                    "limit is ended whole and its result says `killed: memory limit`.")
