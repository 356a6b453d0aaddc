"""Plugins call out through the picker's one shared HTTP client: ``token-producer`` in a real ``epp serve``.

The runtime hands every plugin context the same client (``PluginContext.http``), across pools and
reloads, and closes it once at stop. Two ``token-producer`` instances run in configuration order
before scheduling: the first asks a port where nothing listens (its call fails, is counted, and
the request goes on without tokens), the second a simulated vLLM's render endpoint (its call
succeeds, so it counts no failure). The request is routed either way.
"""

from __future__ import annotations

from pathlib import Path

from epp.plugins.token_producer import TokenProducer
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- {type: token-producer, name: unreachable, parameters: {modelName: m, vllm: {url: "http://127.0.0.1:9"}}}
- {type: token-producer, name: render, parameters: {modelName: m, vllm: {url: "URL"}}}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
"""


def _producers(env: HermeticPool) -> tuple[TokenProducer, TokenProducer]:
    plugins = env.runtime.pools[0].routing.config.plugins
    unreachable, render = plugins["unreachable"], plugins["render"]
    assert isinstance(unreachable, TokenProducer) and isinstance(render, TokenProducer)
    return unreachable, render


async def test_token_producers_render_through_the_shared_client_before_and_after_a_reload(
    epp_pool: PoolFactory, tokenizer_dir: Path, tmp_path: Path
) -> None:
    async with ModelServer(SimConfig(model="m", tokenizer=str(tokenizer_dir)), host="127.0.0.1") as renderer:
        config = tmp_path / "config.yaml"
        config.write_text(CONFIG.replace("URL", renderer.url))
        env = await epp_pool("v1", pods=2, picker_args=["--config-file", str(config)])
        for reloaded in (False, True):
            routed = await env.route({"model": "m", "prompt": "hello there, how are you"})
            assert routed.status == 200
            unreachable, render = _producers(env)
            assert (unreachable.failures, render.failures) == (1, 0)
            if not reloaded:  # the same two producers anew, from a changed file
                config.write_text(CONFIG.replace("URL", renderer.url) + "# changed\n")
                await wait_until(
                    lambda: env.sample("epp_config_reloads_total", result="success") == 1, timeout=15, message="reload"
                )
