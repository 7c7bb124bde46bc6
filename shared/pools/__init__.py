"""Work off the event loop: the I/O executor, offload workers for CPU-bound hostile input, image decoding
(docs/architecture.md "Bounded work")."""
