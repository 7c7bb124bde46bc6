"""ARIs: what a tab shows (the `ari` of a SessionUIState tab).

    file:<path>[/]          a session file, or a directory with a trailing slash
    gamma:file:<doc>        a live Gamma document (doc ids may contain ':' as in g_123:d_456)
    form:<form id>          a user-question form
    builtin:<view>          a client-owned view

Each may carry query state (`?view=grid&zoom=2`) and a location inside the resource (`#card_3`).
Tab identity uses the base resource only (`scheme:resource`); query and location stay part of the
complete reference.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote

from pydantic import BaseModel, ConfigDict, Field

Scheme = Literal["file", "gamma:file", "form", "builtin"]
SCHEMES: tuple[Scheme, ...] = ("gamma:file", "file", "form", "builtin")  # longest prefix first
MAX_ARI_CHARS = 2000

_IDENT = re.compile(r"^[A-Za-z0-9_.:-]{1,256}$")
_VIEW = re.compile(r"^[A-Za-z0-9_.:/-]{1,256}$")


class AriError(ValueError):
    pass


class Ari(BaseModel):
    model_config = ConfigDict(frozen=True)

    scheme: Scheme
    resource: str
    query: tuple[tuple[str, str], ...] = Field(default_factory=tuple)
    location: str | None = None

    @property
    def base(self) -> str:
        """The tab identity: scheme and resource, without view state or location."""
        return f"{self.scheme}:{self.resource}"

    @property
    def is_directory(self) -> bool:
        return self.scheme == "file" and self.resource.endswith("/")

    @property
    def query_dict(self) -> dict[str, str]:
        return dict(self.query)

    def __str__(self) -> str:
        out = f"{self.scheme}:{quote(self.resource, safe='/:._-~')}"
        if self.query:
            out += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in self.query)
        if self.location is not None:
            out += "#" + quote(self.location, safe="_-.:~/")
        return out

    def with_location(self, location: str | None) -> Ari:
        return self.model_copy(update={"location": location})


def parse_ari(text: str) -> Ari:
    if not isinstance(text, str) or not text:
        raise AriError("empty ARI")
    if len(text) > MAX_ARI_CHARS:
        raise AriError(f"ARI is longer than {MAX_ARI_CHARS} characters")
    scheme = next((s for s in SCHEMES if text.startswith(s + ":")), None)
    if scheme is None:
        raise AriError(f"unknown ARI scheme in {text[:40]!r}; expected one of file:, gamma:file:, form:, builtin:")
    rest = text[len(scheme) + 1 :]
    rest, _, fragment = rest.partition("#")
    raw_resource, has_query, raw_query = rest.partition("?")
    resource = unquote(raw_resource)
    query = tuple(parse_qsl(raw_query, keep_blank_values=True)) if has_query else ()
    location = unquote(fragment) if fragment else None
    _check_resource(scheme, resource)
    return Ari(scheme=scheme, resource=resource, query=query, location=location)


def _check_resource(scheme: Scheme, resource: str) -> None:
    if not resource:
        raise AriError(f"{scheme}: ARI names no resource")
    if "\x00" in resource:
        raise AriError("ARI contains a NUL byte")
    if scheme == "file":
        if resource.startswith("/") or "\\" in resource:
            raise AriError("file: paths are relative to the session workspace")
        if any(part == ".." for part in resource.split("/")):
            raise AriError("file: paths may not contain '..'")
    elif scheme == "builtin":
        if not _VIEW.match(resource):
            raise AriError(f"invalid builtin view name {resource!r}")
    elif not _IDENT.match(resource):
        raise AriError(f"invalid {scheme} identifier {resource!r}")


def same_tab(a: str | Ari, b: str | Ari) -> bool:
    """Two references open the same tab when their base resources match."""
    first = parse_ari(a) if isinstance(a, str) else a
    second = parse_ari(b) if isinstance(b, str) else b
    return first.base == second.base


def tab_key(ari: str | Ari) -> str:
    return (parse_ari(ari) if isinstance(ari, str) else ari).base
