"""`env_setting` (shared/settings/): one Settings field read from the environment at call time, validated
as Settings validates it, for the helpers that run without a Settings at hand (README "Configuration")."""

from __future__ import annotations

import pydantic
import pytest

from shared.redis import redis_cluster, topology
from shared.settings import BusSettings, Settings, env_setting


def test_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAMMA_REDIS_WAIT_MS", raising=False)
    assert env_setting("redis_wait_ms") == BusSettings.model_fields["redis_wait_ms"].default == 250
    monkeypatch.setenv("GAMMA_REDIS_WAIT_MS", " ")
    assert env_setting("redis_wait_ms") == 250


def test_read_at_call_time_and_validated_like_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_REDIS_WAIT_MS", "40")
    assert redis_cluster.wait_ms() == 40 == Settings().bus.redis_wait_ms
    monkeypatch.setenv("GAMMA_REDIS_WAIT_MS", "-1")  # Settings refuses it (ge=0): so does the helper
    with pytest.raises(pydantic.ValidationError):
        redis_cluster.wait_ms()


def test_cluster_choice_and_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAMMA_REDIS_CLUSTER", raising=False)
    assert redis_cluster.forced() is None
    for raw, expected in (("1", True), ("yes", True), ("0", False), ("off", False)):
        monkeypatch.setenv("GAMMA_REDIS_CLUSTER", raw)
        assert redis_cluster.forced() is expected
    monkeypatch.setenv("GAMMA_REDIS_CLUSTER_NODES", "a:7000, b:7001,junk")
    assert redis_cluster.extra_nodes() == [("a", 7000), ("b", 7001)]


def test_the_instance_names_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_INSTANCE", "pod-9")
    assert topology.consumer_name("digest").startswith("digest-pod-9-")
