"""The model adapter: one model call streamed over the Responses API or Chat Completions, its attempts, retries and
provider gate, the cache breakpoints and alarm, messages converted at the model boundary.

See docs/architecture.md "Model calls: retries and recovery"."""
