"""Precise prefix routing in a test: pods that publish KV events, the picker config that reads them.

Both sides must agree (the tokenizer's files, the model name in the event topic, the events
port), so they are written once, here: :func:`kv_events_sim_config` for each simulated pod,
:func:`precise_picker_config` for each picker (llm-d's sample chain: ``token-producer`` →
``precise-prefix-cache-producer`` → ``prefix-cache-scorer``, with the load scorers), and
:func:`events_applied`, the condition a test waits for before it asks a picker to route on what
the pods announced (ZMQ delivers asynchronously; every replica applies each event on its own time),
and :func:`wait_subscribed`, which announces until every picker hears every pod.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path

import aiohttp

from epp.kvevents.ingest import SourceCounts
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.modelserver.kv_events import KvEventsConfig
from epp_sim.tiny_tokenizer import sentence
from epp_sim.waits import wait_until

__all__ = [
    "MODEL",
    "SERVING_LABELS",
    "announce",
    "events_applied",
    "llm_d_precise_sample",
    "kv_events_sim_config",
    "precise_picker_config",
    "wait_subscribed",
]

MODEL = "tiny-model"
SERVING_LABELS = {"llm-d.ai/inference-serving": "true"}
"""The label ``precise-prefix-cache-producer`` selects the pods it subscribes to by (llm-d's default)."""


def kv_events_sim_config(
    tokenizer: Path | None,
    host: str,
    events_port: int,
    *,
    replay_port: int = 0,
    num_blocks: int = 256,
    central: str = "",
    port: int = 0,
) -> SimConfig:
    """A fast simulated vLLM at ``host`` with the tokenizer (None: the simulator's own tokenization),
    publishing KV events on ``events_port``, or, with ``central``, connecting to that endpoint (llm-d's
    central mode: the topic then names the pod ``host:port``, as llm-d's samples set it)."""
    events = KvEventsConfig(
        enable_kv_cache_events=True,
        endpoint=central or f"tcp://*:{events_port}",
        replay_endpoint=f"tcp://*:{replay_port}" if replay_port else None,
        topic=f"kv@{host}:{port}@{MODEL}" if central else f"kv@{host}@{MODEL}",
    )
    return SimConfig(
        model=MODEL,
        tokenizer=str(tokenizer) if tokenizer is not None else None,
        kv_events=events,
        num_gpu_blocks=num_blocks,
        max_model_len=num_blocks * 16,
        max_num_batched_tokens=2048,
        time_scale=50.0,
        default_max_tokens=4,
    )


CHAIN = "chain"
ALL_IN_ONE = "all-in-one"
"""How a picker's configuration spells precise routing: llm-d's plugin chain, or its deprecated
all-in-one ``precise-prefix-cache-scorer`` (same parameters, same weights)."""

_PRECISE = {
    CHAIN: """- type: precise-prefix-cache-producer
  parameters:{indexer}
    kvEventsConfig: {events}
- type: prefix-cache-scorer
  parameters: {{prefixMatchInfoProducerName: precise-prefix-cache-producer}}""",
    ALL_IN_ONE: """- type: precise-prefix-cache-scorer
  parameters:{indexer}
    kvEventsConfig: {events}""",
}
SCORER = {CHAIN: "prefix-cache-scorer", ALL_IN_ONE: "precise-prefix-cache-scorer"}
"""The plugin that scores prefix matches in each form."""
_EXTRACTOR = {CHAIN: "precise-prefix-cache-producer", ALL_IN_ONE: "precise-prefix-cache-scorer"}


def precise_picker_config(
    tokenizer: Path | None,
    events_port: int,
    *,
    replay_port: int = 0,
    form: str = CHAIN,
    central: str = "",
    render_url: str = "",
    model: str = MODEL,
    index: str = "",
) -> str:
    """The EndpointPickerConfig routing on the pods' KV events, as upstream's precise sample.

    With ``index`` (a Valkey/Redis address) the KV-block index lives on that server (llm-d's
    ``kvBlockIndexConfig.valkeyConfig``), shared by every picker configured with it.

    With ``central`` the picker binds that endpoint for every pod to connect to (llm-d's
    ``zmqEndpoint``) and dials none; otherwise it dials each pod's ``events_port``. Tokens come
    from ``tokenizer`` (token-producer's local backend) or, with ``render_url``, from that model
    server's render endpoint (its vllm backend, for ``model``).
    """
    replay = f", replaySocketPort: {replay_port}" if replay_port else ""
    events = (
        f"{{zmqEndpoint: '{central}', discoverPods: false}}"
        if central
        else f"{{podDiscoveryConfig: {{socketPort: {events_port}{replay}}}}}"
    )
    indexer = f"\n    indexerConfig: {{kvBlockIndexConfig: {{valkeyConfig: {{address: '{index}'}}}}}}" if index else ""
    tokens = (
        f'{{modelName: {model}, vllm: {{url: "{render_url}"}}}}'
        if render_url
        else f'{{local: {{tokenizerPath: "{tokenizer}"}}}}'
    )
    return f"""
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {tokens}
- type: endpoint-notification-source
{_PRECISE[form].format(events=events, indexer=indexer)}
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {{pluginRef: {SCORER[form]}, weight: 2}}
  - {{pluginRef: queue-scorer, weight: 1}}
  - {{pluginRef: kv-cache-utilization-scorer, weight: 1}}
  - {{pluginRef: max-score-picker}}
dataLayer:  # as upstream's sample: the producer learns endpoints from the endpoint-notification-source
  sources:
  - pluginRef: endpoint-notification-source
    extractors: [{{pluginRef: {_EXTRACTOR[form]}}}]
"""


def llm_d_precise_sample(
    *,
    model: str = "hf-repo/model-name",
    render_url: str = "http://localhost:8000",
    events_port: int = 0,
    enable_metrics: bool = True,
) -> str:
    """The llm-d router's ``deploy/config/epp-precise-prefix-cache-config.yaml`` (@ebab6879), body only.

    Without its ``decode-filter`` (a P/D-disaggregation filter this picker does not load); the
    deployment's own names are parameters: the model, the render URL (a model server or a
    ``vllm launch render`` sidecar) and, when given, the pods' KV-event port.
    """
    events = (
        f"\n      kvEventsConfig:\n        podDiscoveryConfig:\n          socketPort: {events_port}"
        if events_port
        else ""
    )
    return f"""\
plugins:
  - type: token-producer
    parameters:
      modelName: {model}
      vllm:
        url: {render_url}
  - type: endpoint-notification-source
  - type: metrics-data-source
  - type: core-metrics-extractor
  - type: single-profile-handler
  - type: precise-prefix-cache-producer
    parameters:
      tokenProcessorConfig:
        blockSize: 64
      indexerConfig:
        kvBlockIndexConfig:
          enableMetrics: {str(enable_metrics).lower()}{events}
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: precise-prefix-cache-producer
  - type: kv-cache-utilization-scorer
  - type: queue-scorer
  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
    - pluginRef: endpoint-notification-source
      extractors:
        - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
        weight: 2.0
      - pluginRef: kv-cache-utilization-scorer
        weight: 1.0
      - pluginRef: queue-scorer
        weight: 1.0
      - pluginRef: max-score-picker
"""


async def announce(http: aiohttp.ClientSession, url: str, prompt: str, *, model: str = MODEL) -> None:
    """Send ``prompt`` straight to the model server at ``url`` (no picker sees it): it stores and announces it."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1}
    async with http.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()


def events_applied(sources: Iterable[SourceCounts], servers: Iterable[ModelServer]) -> bool:
    """Every message each server has published has been applied by its source among ``sources``.

    A source is matched to its publisher by the ZMQ endpoint a subscriber dials, or, for engines
    heard on a central socket, by the ``ip:port`` their topic names; a server with no source yet
    is not caught up. The last sequence number, not a count: a message sent before the
    subscription reached the publisher is lost to it, as with vLLM.
    """
    last_seq = {s.source: s.last_seq for s in sources}
    for server in servers:
        publisher = server.kv_events
        if publisher is None:
            raise ValueError(f"{server.host} publishes no KV events")
        source = publisher.endpoint if publisher.binds else server.address
        if source not in last_seq:
            return False
        if publisher.seq and last_seq[source] != publisher.seq - 1:
            return False
    return True


async def wait_subscribed(
    servers: Sequence[ModelServer],
    send: Callable[[ModelServer, str], Awaitable[None]],
    replicas: Callable[[], Iterable[Iterable[SourceCounts]]],
    *,
    timeout: float = 15.0,
) -> None:
    """Announce a fresh prompt on every server (``send``) until every replica has applied all.

    A ZMQ subscription reaches its publisher a moment after the subscriber connects, and what is
    published before that is lost to it; ``replicas`` gives each picker's subscribers as they are now.
    """
    round_ = 0

    async def heard() -> bool:
        nonlocal round_
        round_ += 1
        for server in servers:
            await send(server, f"warm up {round_} " + sentence(random.Random(round_), 20))
        return all(events_applied(subscribers, servers) for subscribers in replicas())

    await wait_until(heard, timeout=timeout, interval=0.05, message="every picker subscribed to every pod")
