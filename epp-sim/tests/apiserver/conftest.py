"""The fake API server fixture: a server on a free loopback port with a kubeconfig, fresh per test."""

from __future__ import annotations

from epp_sim.apiserver import apiserver_fixture

apiserver = apiserver_fixture(bookmark_interval=0.05)
