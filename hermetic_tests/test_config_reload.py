"""Reloads of ``epp serve --config-file``: loaded off the loop, put in force in one step, a refused one a no-op.

The picker runs over two simulated pods. A refused reload (it turns the ``flowControl`` gate on,
which is read once at startup) also brings a plugin the running configuration does not have and
settings the picker runs without: loading it builds the plugins (one of them, a precise prefix
producer, subscribes to every endpoint's KV events once in force) and finds the notices, but no
subscriber starts, ``/metrics`` afterwards differs from before only by the reload's own failure
series, and the log has only the rejection. The pool's scrapers are stopped first (and the staleness threshold is
long), so nothing else changes ``/metrics`` meanwhile but the endpoints' metrics age, a clock.
A good reload then publishes its notices and the new plugin's series once it is in force. A
reload whose tokenizer file is a FIFO blocks its load until the test writes the file: requests
keep being routed meanwhile, which they could not be were the load on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import aiohttp
import pytest

from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.tiny_tokenizer import write_tiny_tokenizer
from epp_sim.waits import wait_until

HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
QUEUE_PROFILE = "schedulingProfiles:\n- {name: default, plugins: [{pluginRef: queue-scorer}]}\n"
RUNNING = HEAD + "plugins:\n- type: queue-scorer\n" + QUEUE_PROFILE
EXTRAS = (  # plugins the running config lacks (one dials each endpoint's KV events), two settings we run without
    "plugins:\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n"
    "- type: precise-prefix-cache-producer\n"
    "  parameters: {kvEventsConfig: {podDiscoveryConfig: {podLabelSelector: ''}}}\n"
    "schedulingProfiles:\n- name: default\n"
    "  plugins: [{pluginRef: queue-scorer}, {pluginRef: kv-cache-utilization-scorer}]\n"
    "dataLayer: {injectDefaults: false}\n"
)
REFUSED = HEAD + "featureGates: [flowControl, haPopulateNonLeaderDatastore=false]\n" + EXTRAS
GOOD = HEAD + "featureGates: [haPopulateNonLeaderDatastore=false]\n" + EXTRAS
RELOAD_SERIES = ("epp_config_reloads", "epp_config_last_reload_successful")
CLOCK_SERIES = ("epp_endpoint_metrics_age_seconds{",)  # seconds since the last scrape: moves with time alone
KV_SCORER_SERIES = 'plugin_name="kv-cache-utilization-scorer"'


def kv_event_tasks() -> list[str]:
    """The running KV-event subscribers (a precise producer starts one per endpoint once in force)."""
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("kv-events")]


async def metrics_text(env: HermeticPool) -> str:
    async with aiohttp.ClientSession() as http, http.get(env.picker.metrics_url) as resp:
        assert resp.status == 200
        return await resp.text()


def lines(text: str) -> set[str]:
    """Every line of a /metrics page (samples with their values, HELP and TYPE) but the reload's own series
    and the samples that read a clock."""
    return {
        line
        for line in text.splitlines()
        if not any(name in line for name in RELOAD_SERIES) and not line.startswith(CLOCK_SERIES)
    }


async def start(epp_pool: PoolFactory, config: Path) -> HermeticPool:
    """The picker over two pods, ``config`` (holding RUNNING) its file."""
    args = ["--config-file", str(config), "--metrics-staleness-threshold", "1h"]
    env = await epp_pool("v1", pods=2, picker_args=args)
    assert (await env.route({"model": "m", "prompt": "p"})).status == 200  # the running plugins' series exist
    return env


async def test_a_refused_reload_changes_nothing_but_its_failure_series_and_log_line(
    epp_pool: PoolFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "epp-config.yaml"
    config.write_text(RUNNING)
    env = await start(epp_pool, config)
    (pool,) = env.runtime.pools
    await pool.scrapers.stop()  # scrapes are the one other thing that moves /metrics on its own
    await wait_until(lambda: env.sample("epp_ready") == 1, message="ready")  # so is readiness, until it is
    before = await metrics_text(env)
    assert KV_SCORER_SERIES not in before

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="epp"):
        config.write_text(REFUSED)
        await wait_until(lambda: env.sample("epp_config_reloads_total", result="rejected") == 1, message="refused")
        after = await metrics_text(env)
    assert lines(after) == lines(before)
    assert kv_event_tasks() == []  # the refused configuration's producer was made, never started
    assert env.sample("epp_config_last_reload_successful") == 0
    picker_lines = [(r.levelname, r.getMessage()) for r in caplog.records if not r.name.startswith("epp.kube")]
    assert picker_lines == [("ERROR", "configuration rejected, keeping the last good one")]  # (watches log as they go)
    assert "flowControl" in env.runtime.config_status.last_error and env.runtime.config_status.generation == 1
    assert set(pool.config.plugins) >= {"queue-scorer"} and "kv-cache-utilization-scorer" not in pool.config.plugins

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="epp"):
        config.write_text(GOOD)
        await wait_until(lambda: env.runtime.config_status.generation == 2, message="reloaded")
    assert "kv-cache-utilization-scorer" in pool.config.plugins
    assert len(kv_event_tasks()) == 2  # in force, the producer subscribes to both pods
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("configuration setting has no effect") == 2  # each notice once, after the swap
    assert env.sample("epp_config_ignored_settings", setting="featureGates.haPopulateNonLeaderDatastore") == 1
    assert env.sample("epp_config_ignored_settings", setting="dataLayer") == 1
    assert (await env.route({"model": "m", "prompt": "q"})).status == 200
    assert KV_SCORER_SERIES in await metrics_text(env)  # its series exist once it is in force and used


async def test_a_reload_loads_on_a_worker_thread_while_requests_are_routed(
    epp_pool: PoolFactory, tmp_path: Path
) -> None:
    tokenizer = (write_tiny_tokenizer(tmp_path / "tokenizer") / "tokenizer.json").read_text()
    fifo = tmp_path / "mounted" / "tokenizer.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # reading it blocks until a writer opens it and closes it
    config = tmp_path / "epp-config.yaml"
    config.write_text(RUNNING)
    env = await start(epp_pool, config)
    config.write_text(
        HEAD + "plugins:\n- type: queue-scorer\n"
        f"- {{type: token-producer, parameters: {{modelName: m, local: {{tokenizerPath: {fifo}}}}}}}\n" + QUEUE_PROFILE
    )
    writers: list[int] = []

    def reader_waiting() -> bool:
        """The load has opened the FIFO: a non-blocking open for writing succeeds only then."""
        try:
            writers.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return False
        return True

    await wait_until(reader_waiting, timeout=10, message="the load opening the tokenizer file")
    (writer,) = writers
    os.set_blocking(writer, True)
    with os.fdopen(writer, "wb") as pipe:  # closed (EOF for the reader) however the test ends
        for i in range(3):  # the load waits in its read: the loop does not
            assert (await env.route({"model": "m", "prompt": f"during the load {i}"})).status == 200
        assert env.runtime.config_status.generation == 1
        await asyncio.to_thread(pipe.write, tokenizer.encode())
    await wait_until(lambda: env.runtime.config_status.generation == 2, timeout=10, message="reloaded")
    (pool,) = env.runtime.pools
    assert "token-producer" in pool.config.plugins
