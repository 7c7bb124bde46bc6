"""The X-Gamma-Digest header (services/proxy/artifacts.py `client_digest`): non-ASCII text arrives as
the UTF-8 the client sent (raw or percent-encoded), never read as Latin-1; what is not UTF-8 is a 400."""

from __future__ import annotations

import pytest

from services.proxy.artifacts import client_digest
from services.proxy.edge.errors import ApiError


def as_server_sees(raw: bytes) -> str:
    """Header bytes as the ASGI server hands them over (Latin-1)."""
    return raw.decode("latin-1")


def test_raw_utf8_is_read_as_utf8() -> None:
    assert client_digest(as_server_sees("Retitled to “Café → Zürich” ✓".encode())) == "Retitled to “Café → Zürich” ✓"
    assert client_digest(as_server_sees("ѕystem".encode())) == "ѕystem"


def test_percent_encoded_utf8_and_plain_ascii() -> None:
    assert client_digest("Caf%C3%A9%20%E2%9C%93") == "Café ✓"
    assert client_digest("50% done") == "50% done"
    assert client_digest("  ") is None and client_digest(None) is None


@pytest.mark.parametrize("raw", [b"caf\xe9", b"\xff\xfe", b"ok %ff", b"\xc3"])
def test_what_is_not_utf8_is_refused(raw: bytes) -> None:
    with pytest.raises(ApiError) as err:
        client_digest(as_server_sees(raw))
    assert err.value.status == 400 and "UTF-8" in err.value.message
