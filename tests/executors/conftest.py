"""Fixtures for executor tests: a private Ray cluster on 127.0.0.1 and a fake-judge server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Ray reads this when first imported: with it a 127.0.0.1 cluster binds loopback only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False, configure_logging=False, namespace="drkernel-tests")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from drkernel.server.launch import ServerProcess

    db = tmp_path_factory.mktemp("serve") / "tasks.db"
    with ServerProcess(db, extra=["--judge", "fake", "--workers", "2", "--isolation", "thread"]) as s:
        yield s.url
