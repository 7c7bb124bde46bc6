"""structlog JSON logs; bind session_id / message_id with structlog.contextvars. A line written
while a span is current carries its `trace_id` and `span_id` (shared/telemetry/tracing.py)."""

from __future__ import annotations

import logging
import sys

import structlog

from shared.telemetry.tracing import add_trace_ids


def configure_logging(service: str, level: int = logging.INFO) -> structlog.stdlib.BoundLogger:
    # Standard-library records (uvicorn, FastStream, redis-py) are rendered as JSON lines too, with the
    # same bound context (service, session_id, ...), so every line a service writes parses.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                add_trace_ids,
                structlog.processors.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # FastStream logs per-message and shutdown chatter at INFO; keep warnings and errors only. Its
    # "faststream" logger comes with its own text handler and propagate=False: route it to ours.
    faststream_logger = logging.getLogger("faststream")
    faststream_logger.setLevel(logging.WARNING)
    faststream_logger.handlers.clear()
    faststream_logger.propagate = True
    # httpx logs every request it sends at INFO (one formatted line per model request, on the event
    # loop while other sessions stream: ~1% of the runtime's loop while 200 turns start, bench-stream);
    # the runtime's model requests have their spans and `model_request` events. Warnings stay (all at DEBUG).
    logging.getLogger("httpx").setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))
    structlog.contextvars.bind_contextvars(service=service)
    return structlog.get_logger()


def get_logger(**bound: object) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger().bind(**bound)
