"""Container health probe: `python deploy/healthcheck.py [service] [path]`.

The image runs one service chosen by its command (`python -m services.<name>`), so the probe reads
PID 1's command line to learn which one, takes its port from the same settings the service uses, and
asks `/healthz` (or the path given). Exit 0 = healthy, 1 = not. Only the standard library and
`shared.settings`, so it stays cheap enough to run every few seconds.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared.settings import Settings  # noqa: E402 - needs the path above

# `connectors`: the example connector (services/connectors/example), port GAMMA_CONNECTOR_PORT.
SERVICES = ("proxy", "notifications", "runtime", "digest", "compaction", "connectors")


def service_from_cmdline(cmdline: bytes) -> str | None:
    """`python -m services.runtime` (NUL-separated, as in /proc/1/cmdline) -> "runtime"."""
    for arg in cmdline.split(b"\0"):
        text = arg.decode(errors="replace")
        if text.startswith("services."):
            name = text.removeprefix("services.").split(".")[0]
            if name in SERVICES:
                return name
    return None


def port_of(service: str, settings: Settings) -> int:
    return int(getattr(settings.server, f"{service}_port"))


def probe(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    service = argv[1] if len(argv) > 1 and argv[1] in SERVICES else None
    path = next((a for a in argv[1:] if a.startswith("/")), "/healthz")
    if service is None:
        try:
            service = service_from_cmdline(Path("/proc/1/cmdline").read_bytes())
        except OSError:
            service = None
    if service is None:
        print("healthcheck: cannot tell which service runs here", file=sys.stderr)
        return 1
    ok = probe(f"http://127.0.0.1:{port_of(service, Settings())}{path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
