"""Redis: key and stream names, wire helpers, Cluster, reconnects, fences, revisions, deletion, dormancy, the stream
topology (docs/architecture.md "Streams")."""
