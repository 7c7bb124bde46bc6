"""Settings of notifications and connectors (docs/architecture.md "Connectors")."""

from __future__ import annotations

from pydantic import Field, field_validator

from shared.contracts.streams.notifications import NOTIFICATION_TYPES
from shared.settings.area import Area


class NotificationSettings(Area):
    """Notifications and connectors: which types wake a session, connector registration and reach."""

    urgent_notification_types: str = Field("", validation_alias="GAMMA_URGENT_NOTIFICATION_TYPES",
        description="Notification types that wake a dormant session (comma-separated, e.g. `approval.resolved`); an "
                    "unknown type fails at start; the others wait for the user's next wake.")
    max_connectors: int = Field(32, ge=1, le=1000, validation_alias="GAMMA_MAX_CONNECTORS",
        description="Connectors registered at once (docs/architecture.md \"Connectors\"); 422 past it.")
    notifications_url: str = Field("", validation_alias="GAMMA_NOTIFICATIONS_URL",
        description="Where a connector reaches the notifications service (registration, results); empty: this host "
                    "on `GAMMA_NOTIFICATIONS_PORT`.")
    mcp_secret_key: str = Field("", validation_alias="GAMMA_MCP_SECRET_KEY",
        description="Fernet key(s) that encrypt MCP connector credentials at rest (docs/integration.md \"MCP "
                    "connectors\"); comma-separated to rotate: the first encrypts, all decrypt. Empty: an MCP connector "
                    "with a credential is refused (503). Generate one with `python -c 'from cryptography.fernet import "
                    "Fernet; print(Fernet.generate_key().decode())'`.")
    mcp_allowed_hosts: str = Field("", validation_alias="GAMMA_MCP_ALLOWED_HOSTS",
        description="Host names and CIDRs an MCP connector may reach although they are not public (loopback, private, "
                    "link-local), and may reach over plain http; comma-separated. Empty: public https only.")
    mcp_max_response_bytes: int = Field(4 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024,
        validation_alias="GAMMA_MCP_MAX_RESPONSE_BYTES",
        description="Bytes of one MCP response the harness reads (a listing, a call's answer with its progress); past "
                    "it the call is an error result.")
    mcp_list_timeout_s: float = Field(30.0, gt=0, le=300, validation_alias="GAMMA_MCP_LIST_TIMEOUT_S",
        description="Seconds a registration waits for the MCP server's tool list (502 past it).")
    brand_dir: str = Field("", validation_alias="GAMMA_BRAND_DIR",
        description="The example connector's asset directory; empty: the sample in its package.")

    @field_validator("urgent_notification_types")
    @classmethod
    def _known_types(cls, value: str) -> str:
        unknown = sorted(set(value.replace(",", " ").split()) - set(NOTIFICATION_TYPES))
        if unknown:
            raise ValueError(f"unknown notification type(s) {', '.join(unknown)}; known: {', '.join(NOTIFICATION_TYPES)}")
        return value

    @property
    def urgent_types(self) -> frozenset[str]:
        return frozenset(self.urgent_notification_types.replace(",", " ").split())
