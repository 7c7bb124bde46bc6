"""Where the harness may send an MCP request (docs/integration.md "MCP connectors", SSRF).

A URL a user or an operator registers is fetched by the harness, inside its own network: without a
check, `http://169.254.169.254/…` or `http://127.0.0.1:6379/` would make the harness a proxy into
the cloud metadata service or Redis. So: `https` only, no userinfo, no fragment, and every address
the host resolves to must be a global unicast address, unless the operator's allow-list
(`GAMMA_MCP_ALLOWED_HOSTS`: host names or CIDRs) names the host or the address; `http` only for a
host on that list. The check runs at registration and again before every request the harness makes
(the listing, each call, the OAuth token request), so a name that later resolves elsewhere is
refused then.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UrlRefused(ValueError):
    """The URL may not be fetched; the message says why (it names no credential)."""


@dataclass(frozen=True)
class AllowList:
    hosts: frozenset[str]
    networks: tuple[IpNetwork, ...]

    def names(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def covers(self, ip: IpAddress) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)


def allow_list(entries: Iterable[str] | str) -> AllowList:
    """`GAMMA_MCP_ALLOWED_HOSTS`: comma or space separated host names and CIDRs (`10.0.0.0/8`)."""
    if isinstance(entries, str):
        entries = entries.replace(",", " ").split()
    hosts: set[str] = set()
    nets: list[IpNetwork] = []
    for entry in entries:
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return AllowList(frozenset(hosts), tuple(nets))


def _public(ip: IpAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def parse(url: str, allowed: AllowList) -> tuple[str, int]:
    """(host, port) of a URL the harness may fetch, or UrlRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"not a URL: {exc}") from None
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http"):
        raise UrlRefused("the URL must be https")
    if not host:
        raise UrlRefused("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("credentials go in `auth`, never in the URL")
    if parts.fragment:
        raise UrlRefused("the URL must have no fragment")
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in url):
        raise UrlRefused("the URL must be ASCII without spaces or controls (IDNA-encode the host)")
    if parts.scheme == "http" and not (allowed.names(host) or _literal_allowed(host, allowed)):
        raise UrlRefused("the URL must be https (plain http only for a host on GAMMA_MCP_ALLOWED_HOSTS)")
    return host, port or (443 if parts.scheme == "https" else 80)


def _literal_allowed(host: str, allowed: AllowList) -> bool:
    try:
        return allowed.covers(ipaddress.ip_address(host))
    except ValueError:
        return False


async def check(url: str, allowed: AllowList) -> None:
    """Refuse a URL whose host resolves to a loopback, private, link-local (cloud metadata),
    multicast or reserved address, unless the allow-list names the host or covers the address."""
    host, port = parse(url, allowed)
    if allowed.names(host):
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"the host {host} does not resolve: {exc}") from None
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos}
    if not addresses:
        raise UrlRefused(f"the host {host} does not resolve")
    for ip in sorted(addresses, key=str):
        if not _public(ip) and not allowed.covers(ip):
            raise UrlRefused(f"the host {host} resolves to {ip}, a non-public address (loopback, private, link-local "
                             "or reserved); an operator may allow it with GAMMA_MCP_ALLOWED_HOSTS")
