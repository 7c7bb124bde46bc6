"""Settings of the bus: the Redis connection (README "Redis Cluster"), the stream consumers, stream trimming."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from shared.settings.area import Area


class BusSettings(Area):
    """The Redis connection, the stream consumers and the growth of the streams they read."""

    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias="REDIS_URL",
        description="The bus and the small shared state.")
    instance: str = Field("", validation_alias=AliasChoices("GAMMA_INSTANCE", "HOSTNAME"),
        description="This replica's name in its consumer names (the pod name, `HOSTNAME`); unset: the host name.")
    claim_idle_ms: int = Field(5_000, validation_alias="GAMMA_CLAIM_IDLE_MS",
        description="A pending stream entry idle this long is reclaimed by another consumer (ms).")
    max_deliveries: int = Field(5, validation_alias="GAMMA_MAX_DELIVERIES",
        description="Deliveries of one stream entry before it goes to the dead-letter stream.")
    consumer_stall_s: float = Field(60.0, validation_alias="GAMMA_CONSUMER_STALL_S",
        description="A consumer group with waiting entries whose last-delivered id has not moved this long counts as "
                    "stalled (/readyz, metrics).")
    stream_trim_interval_s: float = Field(5.0, gt=0, validation_alias="GAMMA_STREAM_TRIM_INTERVAL_S",
        description="How often each service trims the streams it consumes down to what its groups have acknowledged "
                    "(seconds).")
    digest_debounce_ms: int = Field(300, validation_alias="GAMMA_DIGEST_DEBOUNCE_MS",
        description="The digest's debounce of a session's changes (ms).")
    # Redis Cluster (README "Redis Cluster"): read where the clients are built (shared/redis/redis_cluster.py,
    # `env_setting`), declared here for the settings table and the deploy checks.
    redis_cluster: bool | None = Field(None, validation_alias="GAMMA_REDIS_CLUSTER",
        description="`1` forces a Redis Cluster client, `0` a single-node one; unset, the node `REDIS_URL` names is "
                    "asked `INFO cluster` at start-up.")
    redis_cluster_nodes: str = Field("", validation_alias="GAMMA_REDIS_CLUSTER_NODES",
        description="More cluster nodes (`host:port,...`): a service (re)started while the node `REDIS_URL` names is "
                    "down reaches the cluster through them.")
    redis_wait_ms: int = Field(250, ge=0, le=10_000, validation_alias="GAMMA_REDIS_WAIT_MS",
        description="On a cluster: after a write acknowledged to a client, `WAIT` this long (ms) for one replica; 0 "
                    "turns it off.")
