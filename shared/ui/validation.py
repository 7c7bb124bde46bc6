"""A pydantic ValidationError as one readable line plus a JSON-safe list: the proxy's 422 bodies and
the write model's refusals read the same."""

from __future__ import annotations

from typing import Any


def _loc(loc: Any) -> str:
    return ".".join(str(part) for part in loc) if isinstance(loc, list | tuple) else str(loc)


def validation_summary(errors: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """A readable one-line message plus a JSON-safe list (pydantic `ctx` may hold exception objects)."""
    clean: list[dict[str, Any]] = []
    for err in errors:
        if not isinstance(err, dict):
            clean.append({"msg": str(err)})
            continue
        clean.append({"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "")), "type": str(err.get("type", ""))})
    parts = [f"{_loc(e.get('loc', ''))}: {e['msg']}" if e.get("loc") else e["msg"] for e in clean[:5]]
    more = f" (and {len(clean) - 5} more)" if len(clean) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more, clean
