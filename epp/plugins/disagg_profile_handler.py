"""disagg-profile-handler: decode, then (when a decider says so) encode and prefill; decode is primary.

Upstream's handler (llm-d router ``profilehandler/disagg/disagg_profile_handler.go``), driving every
topology (P/D, E/PD, E/P/D, or decode alone) from one configuration:

``stageOrder: decode-first`` (the default) runs the decode profile; if it picked a pod, the encode
stage runs when an ``encode`` profile exists and ``deciders.encode`` says yes, then the prefill
stage when a ``prefill`` profile exists and ``deciders.prefill`` says yes (the deciders see the
decode pick; before prefill runs, that pick is published as the cycle's ``peer-endpoint`` for
topology-affinity plugins). No decider for a stage disables it. ``stageOrder: prefill-first``
runs prefill whenever its profile exists (so a prefill decider is refused), then encode (its
decider sees no decode pick), then decode, with the prefill pick published as ``peer-endpoint``.
The value is read without case, ``-`` or ``_`` (``decode``, ``prefill`` and "" are accepted too).

The request goes to the decode pick; the prefill pick is named in ``x-prefiller-host-port``,
the encode picks in ``x-encoder-hosts-ports`` (``disagg_headers.py``; a client's copies are
removed). A stage whose profile found no endpoint is skipped, so the request is served without
it; a decode profile that found none fails the request (429). The decision (``decode-only``,
``prefill-decode``, ``encode-decode``, ``encode-prefill-decode``) and each stage's verdict with the
decider's numbers go to the pipeline's recorder: counted in ``llm_d_epp_disagg_decision_total``,
shown by Explain.

Parameters: ``profiles.decode`` / ``.prefill`` / ``.encode`` (defaults: the stage's name),
``deciders.prefill`` / ``.encode`` (names of decider plugins), ``stageOrder``. The deprecated
flat spelling (``decodeProfile``, ``prefillProfile``, ``encodeProfile``,
``prefillDeciderPluginName``, ``encodeDeciderPluginName``, and ``deciderPluginName`` as a weaker
alias of the prefill decider) is read as upstream reads it, each field logged as deprecated;
mixing the two spellings, or a field of neither, is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epp.framework.disaggregation import PEER_ENDPOINT, Decider, Decision, StageOutcome, Verdict, decision_type
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.roles import Stage
from epp.framework.scheduling import CycleState, ProfileResult, SchedulerProfileView, SchedulingResult
from epp.plugins.disagg_headers import STAGE_HEADERS, stage_headers

__all__ = ["FLAT_FIELDS", "TYPE", "DisaggProfileHandler", "StageProfiles", "create", "resolve_decider"]


TYPE = "disagg-profile-handler"

FLAT_FIELDS: Mapping[str, str] = {  # the deprecated flat parameters and their places now
    "decodeProfile": "profiles.decode",
    "prefillProfile": "profiles.prefill",
    "encodeProfile": "profiles.encode",
    "prefillDeciderPluginName": "deciders.prefill",
    "encodeDeciderPluginName": "deciders.encode",
    "deciderPluginName": "deciders.prefill",
}


@dataclass(frozen=True, slots=True)
class StageProfiles:
    """The profile of each stage."""

    decode: str = "decode"
    prefill: str = "prefill"
    encode: str = "encode"


@dataclass(slots=True)
class _Run:
    """One request's progress through the stages (kept in its cycle state)."""

    verdicts: dict[Stage, tuple[Decider, Verdict]] = field(default_factory=dict)
    skipped: dict[Stage, str] = field(default_factory=dict)


def resolve_decider(lookup: Callable[[str, str], Plugin], where: str, name: str) -> Decider:
    """The decider plugin ``name`` (a configuration error when it is not one)."""
    plugin = lookup(where, name)
    if not isinstance(plugin, Decider):
        raise PluginConfigError(f"{where}: plugin {name!r} (type {plugin.typed_name.type!r}) is not a decider")
    return plugin


class DisaggProfileHandler(NamedPlugin):
    """Profile handler and stage-header contributor of disaggregated serving."""

    __slots__ = ("_decider_names", "_key", "encode_decider", "prefill_decider", "prefill_first", "profiles")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.PROFILE_HANDLER})

    def __init__(
        self,
        name: str,
        *,
        profiles: StageProfiles | None = None,
        prefill_decider: str = "",
        encode_decider: str = "",
        prefill_first: bool = False,
    ) -> None:
        super().__init__(name)
        self.profiles = profiles or StageProfiles()
        self.prefill_first = prefill_first
        self._decider_names = {Stage.PREFILL: prefill_decider, Stage.ENCODE: encode_decider}
        self.prefill_decider: Decider | None = None
        self.encode_decider: Decider | None = None
        self._key = f"{TYPE}/{name}"

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        where = f"{TYPE}.parameters.deciders"
        if self._decider_names[Stage.PREFILL]:
            self.prefill_decider = resolve_decider(lookup, f"{where}.prefill", self._decider_names[Stage.PREFILL])
        if self._decider_names[Stage.ENCODE]:
            self.encode_decider = resolve_decider(lookup, f"{where}.encode", self._decider_names[Stage.ENCODE])

    # -- the stages ------------------------------------------------------------------------------

    def _run(self, cycle: CycleState) -> _Run:
        run: _Run | None = cycle.get(self._key)
        if run is None:
            run = cycle[self._key] = _Run()
        return run

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        run = self._run(cycle)
        if self.prefill_first:
            return self._prefill_first(cycle, request, run, profiles, results)
        decode = self.profiles.decode
        if decode not in results:
            return [decode]  # a missing decode profile: the scheduler names it
        decoded = results[decode]
        if decoded is None or not decoded.targets:
            return []
        pick = decoded.targets[0]
        for stage, profile, decider in (
            (Stage.ENCODE, self.profiles.encode, self.encode_decider),
            (Stage.PREFILL, self.profiles.prefill, self.prefill_decider),
        ):
            if not profile or profile in results or stage in run.verdicts or stage in run.skipped:
                continue
            if profile not in profiles:
                run.skipped[stage] = f"no {profile!r} profile"
                continue
            if decider is None:
                run.skipped[stage] = f"no {stage} decider configured"
                continue
            verdict = decider.decide(cycle, request, pick)
            run.verdicts[stage] = (decider, verdict)
            if verdict.disaggregate:
                if stage is Stage.PREFILL:
                    cycle[PEER_ENDPOINT] = pick
                return [profile]
        return []

    def _prefill_first(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        run: _Run,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        names = self.profiles
        if names.decode in results:
            return []
        if names.prefill not in profiles:
            run.skipped.setdefault(Stage.PREFILL, f"no {names.prefill!r} profile")
        elif names.prefill not in results:
            return [names.prefill]
        if names.encode not in results and Stage.ENCODE not in run.verdicts and Stage.ENCODE not in run.skipped:
            if names.encode not in profiles:
                run.skipped[Stage.ENCODE] = f"no {names.encode!r} profile"
            elif self.encode_decider is None:
                run.skipped[Stage.ENCODE] = "no encode decider configured"
            else:
                verdict = self.encode_decider.decide(cycle, request, None)
                run.verdicts[Stage.ENCODE] = (self.encode_decider, verdict)
                if verdict.disaggregate:
                    return [names.encode]
        prefilled = results.get(names.prefill)
        if prefilled is not None and prefilled.targets:
            cycle[PEER_ENDPOINT] = prefilled.targets[0]
        return [names.decode]

    def process_results(
        self, cycle: CycleState, request: InferenceRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        names = self.profiles
        decoded = results.get(names.decode)
        kept: dict[str, ProfileResult | None] = {names.decode: decoded}
        for profile in (names.prefill, names.encode):
            if results.get(profile) is not None:
                kept[profile] = results[profile]
        if decoded is None or not decoded.targets:
            return SchedulingResult(profile_results=kept, primary_profile=names.decode)
        run = self._run(cycle)
        stages = (
            StageOutcome(Stage.DECODE, names.decode, True, "the request is served here", targets=decoded.targets),
            *(
                self._outcome(stage, profile, run, results)
                for stage, profile in ((Stage.ENCODE, names.encode), (Stage.PREFILL, names.prefill))
                if profile
            ),
        )
        used = {s.stage for s in stages if s.ran}
        decision = Decision(
            self.typed_name,
            decision_type(encode=Stage.ENCODE in used, prefill=Stage.PREFILL in used),
            stages,
        )
        return SchedulingResult(profile_results=kept, primary_profile=names.decode, disaggregation=decision)

    def _outcome(
        self, stage: Stage, profile: str, run: _Run, results: Mapping[str, ProfileResult | None]
    ) -> StageOutcome:
        decided = run.verdicts.get(stage)
        decider, verdict = decided if decided is not None else (None, None)
        typed = decider.typed_name if decider is not None else None
        if profile in results:
            result = results[profile]
            if result is not None and result.targets:
                why = verdict.reason if verdict is not None else "prefill-first: prefill always runs"
                return StageOutcome(stage, profile, True, why, typed, verdict, result.targets)
            return StageOutcome(stage, profile, False, f"the {profile!r} profile found no endpoint", typed, verdict)
        if verdict is not None:
            return StageOutcome(stage, profile, False, verdict.reason, typed, verdict)
        return StageOutcome(stage, profile, False, run.skipped.get(stage, "not evaluated"))

    # -- the headers -----------------------------------------------------------------------------

    @property
    def owned_upstream_headers(self) -> frozenset[str]:
        return STAGE_HEADERS

    def upstream_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        return stage_headers(result, self.profiles.prefill, self.profiles.encode)


def _stage_order(value: str) -> bool:
    """True for prefill-first; upstream's spelling rules."""
    normal = value.lower().replace("-", "").replace("_", "")
    if normal in ("", "decodefirst", "decode"):
        return False
    if normal in ("prefillfirst", "prefill"):
        return True
    raise PluginConfigError(
        f"{TYPE}.parameters.stageOrder: invalid stage order {value!r}, must be 'decode-first' or 'prefill-first'"
    )


def _names(p: Params, key: str, fields: tuple[str, ...]) -> dict[str, str]:
    nested = p.nested(key)
    if nested is None:
        return {}
    out = {f: nested.text(f) or "" for f in fields}
    nested.done()
    return out


def _parameters(parameters: Mapping[str, Any]) -> tuple[StageProfiles, str, str, bool]:
    """(profiles, prefill decider, encode decider, prefill-first) from either spelling."""
    keys = set(parameters)
    flat = keys & FLAT_FIELDS.keys()
    if flat and keys & {"profiles", "deciders"}:
        raise PluginConfigError(
            f"{TYPE}.parameters: {sorted(flat)} (deprecated flat fields) mixed with profiles/deciders: "
            "use one format exclusively"
        )
    p = Params(TYPE, parameters)
    prefill_first = _stage_order(p.text("stageOrder") or "")
    if flat:
        given = {k: p.text(k) or "" for k in FLAT_FIELDS}  # each a deprecation notice of the load (compat.py)
        profiles = {
            "decode": given["decodeProfile"],
            "prefill": given["prefillProfile"],
            "encode": given["encodeProfile"],
        }
        deciders = {
            "prefill": given["prefillDeciderPluginName"] or given["deciderPluginName"],
            "encode": given["encodeDeciderPluginName"],
        }
    else:
        profiles = _names(p, "profiles", ("decode", "prefill", "encode"))
        deciders = _names(p, "deciders", ("prefill", "encode"))
    p.done()
    if prefill_first and deciders.get("prefill"):
        raise PluginConfigError(f"{TYPE}.parameters: a prefill decider is not supported with stageOrder prefill-first")
    stage_profiles = StageProfiles(
        decode=profiles.get("decode") or "decode",
        prefill=profiles.get("prefill") or "prefill",
        encode=profiles.get("encode") or "encode",
    )
    return stage_profiles, deciders.get("prefill", ""), deciders.get("encode", ""), prefill_first


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> DisaggProfileHandler:
    profiles, prefill_decider, encode_decider, prefill_first = _parameters(parameters)
    return DisaggProfileHandler(
        name,
        profiles=profiles,
        prefill_decider=prefill_decider,
        encode_decider=encode_decider,
        prefill_first=prefill_first,
    )
