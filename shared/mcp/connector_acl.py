"""A connector's own Redis credential (docs/architecture.md "Connectors", deploy/README.md "Connectors"):
an ACL user that reads and acknowledges its own call stream and can do nothing else.

A connector talks to Redis for one thing: the consumer group `connector` on
`gamma:connectors:{NAME}:calls` (create it, read, claim idle entries, acknowledge;
services/connectors/example/worker.py). Registration and answers go over HTTP to the notifications
service. So its user holds only keys under `gamma:connectors:{NAME}:` and the commands that loop
sends, plus `PING`; no channels, no other key, no other command (the registry, a session's inbox and
call records stay out of its reach).

    python -m shared.mcp.connector_acl brand      # prints the ACL SETUSER command and the redis.conf line
"""

from __future__ import annotations

import sys

from shared.mcp.connectors import check_name
from shared.redis import keys

# What services/connectors/example/worker.py sends (redis-py's CLIENT SETINFO on connect may be
# refused: the client ignores that refusal).
COMMANDS = ("xgroup|create", "xreadgroup", "xautoclaim", "xack", "ping")


def user_name(connector: str) -> str:
    return f"connector-{connector}"


def key_pattern(connector: str) -> str:
    """Every key of this connector: its call stream's prefix (`{` is not a glob character)."""
    return keys.connector_calls(connector).removesuffix("calls") + "*"


def acl_rules(connector: str) -> list[str]:
    """The ACL rules after the user name, without the password (`>secret`, added by the caller)."""
    if check_name(connector):
        raise ValueError(f"not a connector name: {connector!r}")
    return ["on", "resetkeys", f"~{key_pattern(connector)}", "resetchannels", "-@all",
            *(f"+{c}" for c in COMMANDS)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m shared.mcp.connector_acl NAME", file=sys.stderr)
        return 2
    name = argv[0]
    rules = " ".join(acl_rules(name))
    print(f"ACL SETUSER {user_name(name)} reset {rules} >$PASSWORD")
    print(f"# redis.conf / users.acl: user {user_name(name)} {rules} >$PASSWORD")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
