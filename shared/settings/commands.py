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
        description="Per process of a sandboxed command: address space (bytes).")
    sandbox_cpu_s: int = Field(120, validation_alias="GAMMA_SANDBOX_CPU_S",
        description="Per process of a sandboxed command: CPU seconds.")
    sandbox_max_procs: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_PROCS",
        description="Processes of one sandboxed call.")
    sandbox_max_open_files: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_OPEN_FILES",
        description="Open files per process of a sandboxed call.")
    sandbox_tmp_bytes: int = Field(64 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_TMP_BYTES",
        description="Size of a sandboxed command's private `/tmp` and `HOME` (bwrap).")
