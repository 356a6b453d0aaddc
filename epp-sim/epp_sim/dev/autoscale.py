"""``epp dev --autoscale``: the pool's pods come from a simulated Deployment the autoscaler scales.

A :class:`~epp_sim.stack.local.StackComponent`. Once the data plane is up it applies, to the fake API
server, the sample Deployment (``manifests/samples/vllm-deployment.yaml``: its container port set to
the pool's target port, ``replicas`` to the initial count) and an HPA for it annotated the WVA v0.9
way (``llm-d.ai/managed``, the model, the accelerator label; ``maxReplicas`` bounding the addresses
used). A :class:`~epp_sim.workloads.WorkloadsController` turns the Deployment into pods that stay
Pending for the model-load delay and then turn Ready with a simulator on their own ``127.0.0.x``;
their labels match the pool selector, so the picker routes to them once Ready.

The whole loop runs: the autoscaler :class:`~epp.autoscale.controller.Controller` (in this process,
against the API server over HTTP through kr8s, exactly as ``epp autoscale`` does; scraping the Ready
pods directly; V2 analyzer, the shipped default) publishes ``wva_desired_replicas`` on its own
``/metrics``; the cluster's scalers (:class:`~epp_sim.scalers.ClusterScalers`: a stand-in Prometheus
scraping that page, the HPA controller) scale the Deployment to it, on a short cycle. The autoscaler
writes the Deployment only to wake it from zero, as WVA does.

The simulators are made to saturate under ``epp dev --load`` (:data:`DEMO_ENGINE`): a small KV
cache and 20 ms decode steps, so eight concurrent clients fill one pod's cache and queue behind
it, while two pods carry them with KV use between the scale-down and scale-up points. Load is
read as each pod's peak over the last ``window`` seconds (:class:`~epp.autoscale.peak.PeakSource`, as
upstream's ``max_over_time``), so one quiet sample does not give a replica back mid-load.

Every cycle's decisions are summarised by :func:`describe`; a line is reported when a variant's
(current, target, reason) changes, and the latest one is the dashboard's status line.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import aiohttp

from epp.autoscale.controller import Controller, ControllerOptions, Outcome
from epp.autoscale.decision import Reason
from epp.autoscale.inputs import MetricsSource
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.peak import PeakSource
from epp.autoscale.resources import KubeCluster
from epp.autoscale.scaletargets import ACCELERATOR_LABEL
from epp.autoscale.scrape import ScrapeSource
from epp.autoscale.types import VariantKey
from epp.autoscale.variants import MANAGED, MODEL_ID, VARIANT_COST
from epp.autoscale.wake import PickerReader
from epp.clock import Clock, SystemClock
from epp.datalayer.http_client import create_session
from epp.kube.client import Api, close_api, make_api
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer
from epp_sim.apiserver.errors import ApiError
from epp_sim.dev.dashboard import PodRow, pod_row
from epp_sim.scalers import ClusterScalers, PrometheusStandIn, ScrapeTarget
from epp_sim.stability import deployment_stable
from epp_sim.stack.local import LocalStack, StackError
from epp_sim.stack.samples import qualified
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

__all__ = ["DEMO_ENGINE", "AutoscaleConfig", "DevAutoscaler", "describe"]

log = logging.getLogger(__name__)

#: simulator settings that saturate under ``epp dev --load`` (8 clients): see docs/dev.md
DEMO_ENGINE: Mapping[str, Any] = MappingProxyType(
    {"max_model_len": 1536, "num_gpu_blocks": 112, "decode_time_base": 0.02}
)
_POLL_INTERVAL = 0.05

#: ``--scale-to-zero``: the picker queues requests while the pool has no pod (up to 5 minutes), and the
#: autoscaler wakes the Deployment when that queue holds a request for the model (WVA's scale-from-zero)
WAITING_ROOM_CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
flowControl:
  noEndpointRequestTTL: 5m
"""


@dataclass(frozen=True, slots=True)
class AutoscaleConfig:
    """The simulated Deployment and the autoscaler's demo settings; validated when built.

    ``load_delay`` is how long a new pod stays Pending (the model loading), in seconds of
    ``clock``, which also drives the autoscaler's cycles and pending ages (tests inject a
    :class:`~epp.clock.ManualClock`). Pods use ``{base_ip}{first_host}`` onwards, at most
    ``max_replicas`` of them at a time. ``window`` is the peak-load window (0: each cycle's
    instantaneous sample, exactly as ``epp autoscale`` reads it).
    """

    initial_replicas: int = 1
    max_replicas: int = 4
    load_delay: float = 8.0
    interval: float = 3.0
    pending_timeout: float = 60.0
    window: float = 15.0
    accelerator: str = "sim-gpu"
    base_ip: str = "127.0.0."
    first_host: int = 100
    engine: Mapping[str, Any] = field(default_factory=lambda: DEMO_ENGINE)
    clock: Clock = field(default_factory=SystemClock)
    scale_to_zero: bool = False

    def __post_init__(self) -> None:
        for name in ("initial_replicas", "max_replicas"):
            value = getattr(self, name)
            least = 0 if name == "initial_replicas" and self.scale_to_zero else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                what = "a non-negative" if least == 0 else "a positive"
                raise StackError(f"{name} must be {what} integer, got {value!r}")
        if self.initial_replicas > self.max_replicas:
            raise StackError(f"initial replicas ({self.initial_replicas}) exceed max replicas ({self.max_replicas})")
        if self.first_host < 1 or self.first_host + self.max_replicas - 1 > 254:
            raise StackError(
                f"pods {self.base_ip}{self.first_host}..{self.base_ip}{self.first_host + self.max_replicas - 1} "
                "run past .254"
            )
        if not self.load_delay >= 0 or not self.window >= 0:
            raise StackError(f"load_delay ({self.load_delay!r}) and window ({self.window!r}) must be >= 0 seconds")
        if not self.interval > 0 or not self.pending_timeout > 0:
            raise StackError(
                f"interval ({self.interval!r}) and pending_timeout ({self.pending_timeout!r}) must be > 0 seconds"
            )

    @property
    def picker_args(self) -> tuple[str, ...]:
        """``epp serve`` flags this mode needs: with scale-to-zero, the flow-control waiting room."""
        return ("--config-text", WAITING_ROOM_CONFIG) if self.scale_to_zero else ()

    @property
    def hosts(self) -> list[str]:
        return [f"{self.base_ip}{self.first_host + i}" for i in range(self.max_replicas)]


def describe(name: str, outcome: Outcome, *, loading: int = 0) -> str:
    """One line for a variant's decision this cycle, e.g. ``autoscaler: pool 1 → 2 (saturated): …``.

    ``loading`` is how many of its replicas are not Ready yet (shown when the decision is held).
    """
    d = outcome.decision
    if d is None:
        return f"autoscaler: {name}: {outcome.error}"
    error = f" [{outcome.error}]" if outcome.error else ""
    if d.target != d.current:
        return f"autoscaler: {name} {d.current} → {d.target} ({d.reason.value}): {d.message}{error}"
    if d.reason is Reason.PENDING:
        plural = "" if loading == 1 else "s"
        return f"autoscaler: {name} held at {d.current}: pending ({loading} replica{plural} loading){error}"
    if d.reason is Reason.COOLDOWN:
        return f"autoscaler: {name} held at {d.target}: cooldown, {d.message}{error}"
    return f"autoscaler: {name} {d.current}, {d.reason.value}: {d.message}{error}"


class DevAutoscaler:
    """The simulated Deployment, its annotated HPA, the autoscaler and the cluster's scalers, as one stack part.

    ``report`` receives a line whenever a decision changes (``epp dev`` prints it above the
    table). After :meth:`start`: :meth:`wait_ready` before sending load, :meth:`rows` and
    :meth:`status` for the dashboard, :meth:`run_cycle` to drive a cycle by hand (tests).
    """

    name = "autoscaler"

    def __init__(self, config: AutoscaleConfig | None = None, *, report: Callable[[str], None] | None = None) -> None:
        self.config = config or AutoscaleConfig()
        self._report = report or (lambda line: log.info(line))
        self._stack: LocalStack | None = None
        self._workloads: WorkloadsController | None = None
        self._api: Api | None = None
        self._session: aiohttp.ClientSession | None = None
        self._controller: Controller | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._metrics_server: MetricsServer | None = None
        self._scalers: ClusterScalers | None = None
        self._reported: dict[VariantKey, tuple[int, int, Reason | None, bool]] = {}
        self._status = ""
        self._first_seen: dict[str, float] = {}

    @property
    def hosts(self) -> Sequence[str]:
        """The first addresses the Deployment's pods take (the stack picks a target port free there).

        A pod freed on scale-down returns its address to the end of the simulated controller's
        list, so a long session moves on to later addresses, unchecked but very unlikely to be busy.
        """
        return self.config.hosts

    @property
    def workloads(self) -> WorkloadsController:
        """The simulated Deployment controller (``.servers(namespace)`` to pin a pod's load)."""
        if self._workloads is None:
            raise RuntimeError("autoscaler not started")
        return self._workloads

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            raise RuntimeError("autoscaler not started")
        return self._controller

    @property
    def stack(self) -> LocalStack:
        if self._stack is None:
            raise RuntimeError("autoscaler not started")
        return self._stack

    @property
    def variant(self) -> VariantKey:
        """The variant: the HPA, named after the Deployment, in the pool's namespace."""
        samples = self.stack.samples
        return VariantKey(samples.namespace, samples.deployment_name)

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self, stack: LocalStack) -> None:
        """Apply the Deployment and its annotated HPA; start the pods' controller, the autoscaler and the scalers."""
        cfg = self.config
        self._stack = stack
        sim = stack.samples.sim_config(time_scale=stack.config.time_scale, **cfg.engine)
        store = stack.cluster.server.store
        self._workloads = WorkloadsController(
            store,
            clock=cfg.clock,
            load_delay=cfg.load_delay,
            base_ip=cfg.base_ip,
            first_host=cfg.first_host,
            port=stack.target_port,
            sim_config=lambda _template: sim,
        )
        await self._workloads.start()
        ns = stack.samples.namespace
        try:
            store.create("Deployment.apps", self._deployment(), namespace=ns)
            hpa = self._hpa()
            store.create(qualified(hpa), hpa, namespace=ns)
        except ApiError as e:
            raise StackError(f"the fake API server rejected the autoscaler's objects: {e}") from e
        self._api = await make_api(str(stack.kubeconfig))
        self._session = create_session()
        source: MetricsSource = ScrapeSource(self._session, cfg.clock)
        if cfg.window > 0:
            source = PeakSource(source, cfg.clock, window=cfg.window)
        picker = PickerReader(self._session, [stack.picker.metrics_url], cfg.clock) if cfg.scale_to_zero else None
        metrics = AutoscalerMetrics(EppMetrics())
        self._metrics_server = MetricsServer(metrics)
        port = await self._metrics_server.start("127.0.0.1", 0)
        self._controller = Controller(
            KubeCluster(self._api),
            source,
            clock=cfg.clock,
            metrics=metrics,
            options=ControllerOptions(
                interval=cfg.interval,
                pending_timeout=cfg.pending_timeout,
                scale_to_zero=cfg.scale_to_zero,
            ),
            picker=picker,
        )
        target = ScrapeTarget(
            f"http://127.0.0.1:{port}/metrics", {"namespace": "epp-autoscaler", "job": "epp-autoscaler"}
        )
        self._scalers = ClusterScalers(
            store, PrometheusStandIn(self._session, [target]), clock=cfg.clock, sync_period=cfg.interval
        )
        self._tasks = [
            start_guarded(self._controller.run(on_cycle=self._report_cycle), name="epp-dev-autoscaler"),
            start_guarded(self._scalers.run(), name="epp-dev-scalers"),
        ]

    async def stop(self) -> None:
        """Stop the loops, then the clients, then the pods (their simulators); safe after a failed start."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await cancel_and_wait(task)
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            await server.stop()
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        api, self._api = self._api, None
        if api is not None:
            await close_api(api)
        if self._workloads is not None:
            await self._workloads.stop()

    def _deployment(self) -> dict[str, Any]:
        samples, port = self.stack.samples, self.stack.target_port
        dep = copy.deepcopy(samples.deployment)
        dep["metadata"]["namespace"] = samples.namespace
        dep["spec"]["replicas"] = self.config.initial_replicas
        container = dep["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [a for a in container.get("args") or [] if not str(a).startswith("--port")]
        container["args"].append(f"--port={port}")
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        return dep

    def _hpa(self) -> dict[str, Any]:
        """The variant, declared as upstream v0.9 declares it: an HPA on the gauge, annotated."""
        samples, cfg = self.stack.samples, self.config
        name, ns = samples.deployment_name, samples.namespace
        rules = {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 10, "periodSeconds": 15}]}
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {ACCELERATOR_LABEL: cfg.accelerator},
                "annotations": {MANAGED: "true", MODEL_ID: samples.model, VARIANT_COST: "10"},
            },
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 0 if cfg.scale_to_zero else 1,
                "maxReplicas": cfg.max_replicas,
                "behavior": {"scaleUp": rules, "scaleDown": rules},
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {
                                "name": "wva_desired_replicas",
                                "selector": {"matchLabels": {"variant_name": name, "exported_namespace": ns}},
                            },
                            "target": {"type": "AverageValue", "averageValue": "1"},
                        },
                    }
                ],
            },
        }

    # ------------------------------------------------------------------------------ the loop

    async def run_cycle(self) -> dict[VariantKey, Outcome]:
        """One autoscaler cycle, then the scalers acting on it, by hand (tests); reported like the loop's."""
        outcomes = await self.controller.run_cycle()
        self._report_cycle(outcomes)
        if self._scalers is not None:
            await self._scalers.sync()
        return outcomes

    def _report_cycle(self, outcomes: Mapping[VariantKey, Outcome]) -> None:
        """Report the decisions that changed and update the status line."""
        for key, outcome in sorted(outcomes.items()):
            d = outcome.decision
            line = describe(key.name, outcome, loading=self._loading(key))
            self._status = line
            seen = (d.current, d.target, d.reason, bool(outcome.error)) if d else (0, 0, None, True)
            if self._reported.get(key) != seen:
                self._reported[key] = seen
                self._report(line)

    # ------------------------------------------------------------------------------ views

    def deployment(self) -> Mapping[str, Any]:
        """The Deployment as the API server holds it (read-only)."""
        samples = self.stack.samples
        return self.stack.cluster.server.store.get(
            "Deployment.apps", samples.deployment_name, namespace=samples.namespace
        )

    def _loading(self, key: VariantKey) -> int:
        if key != self.variant:
            return 0
        status = self.deployment().get("status") or {}
        return max(0, int(status.get("replicas") or 0) - int(status.get("readyReplicas") or 0))

    async def wait_ready(self, *, timeout: float | None = None) -> None:
        """Wait until the Deployment is stable and the picker routes to all of its replicas."""
        stack = self.stack
        limit = stack.config.ready_timeout + self.config.load_delay if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        await wait_until(
            lambda: deployment_stable(self.deployment()),
            timeout=limit,
            interval=_POLL_INTERVAL,
            message=f"Deployment {self.variant} stable",
            error=StackError,
        )
        replicas = int((self.deployment().get("spec") or {}).get("replicas") or 0)
        await stack.wait_ready_pods(replicas, timeout=max(0.0, deadline - loop.time()))

    def rows(self) -> list[PodRow]:
        """The Deployment's pods in creation order: Ready ones with their simulator's load, others loading."""
        samples = self.stack.samples
        store = self.stack.cluster.server.store
        selector = ",".join(f"{k}={v}" for k, v in samples.pool["spec"]["selector"]["matchLabels"].items())
        pods = store.select(store.type_of("pods"), samples.namespace, label_selector=selector)
        servers = self.workloads.servers(samples.namespace)
        now = self.config.clock.now()
        self._first_seen = {p["metadata"]["name"]: self._first_seen.get(p["metadata"]["name"], now) for p in pods}
        out = []
        for pod in sorted(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])):
            name = pod["metadata"]["name"]
            status = pod.get("status") or {}
            server = servers.get(name)
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
            if pod["metadata"].get("deletionTimestamp"):
                state = "Terminating"
            elif ready:
                state = "Ready"
            else:
                state = f"Loading {now - self._first_seen[name]:.0f}s"
            stats = server.stats() if server is not None and ready else {}
            out.append(pod_row(name, str(status.get("podIP") or "-"), stats, state=state))
        return out

    def status(self) -> str:
        """The latest decision, as :func:`describe` put it (empty before the first cycle)."""
        return self._status
