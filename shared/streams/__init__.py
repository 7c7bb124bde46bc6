"""The wire adapters over Redis Streams: the service bus, the multiplexed per-session stream reader, the inbox,
trimming, the stall watchdog, causal markers.

See docs/architecture.md "Streams"."""
