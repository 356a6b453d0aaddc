"""The conformance suite's response hook: echo the endpoint the data plane says served the request.

The EPP protocol has the data plane report, with each response, the ``ip:port`` that produced
it: ``metadata_context`` namespace ``envoy.lb``, key ``x-gateway-destination-endpoint-served``
(Envoy sends a namespace only when the ext_proc filter lists it in
``metadata_options.forwarding_namespaces``). The GIE conformance test
``GatewayDestinationEndpointServed`` reads it back from the response header
``x-conformance-test-served-endpoint``, which the picker sets with
``--enable-conformance-test-hooks``, in the words of the suite's lwepp (and llm-d's
``destination-endpoint-served-verifier``) when the report is missing.
"""

from __future__ import annotations

from epp.extproc import pb
from epp.framework.headers import CONFORMANCE_SERVED_ENDPOINT, DESTINATION_ENDPOINT_SERVED, LB_METADATA_NAMESPACE

__all__ = ["MISSING_LB_METADATA", "MISSING_SERVED_METADATA", "served_endpoint_echo"]

MISSING_LB_METADATA = "fail: missing envoy lb metadata"
MISSING_SERVED_METADATA = "fail: missing destination endpoint served metadata"


def served_endpoint_echo(message: pb.ProcessingRequest) -> dict[str, str]:
    """``{x-conformance-test-served-endpoint: <served ip:port, or why it is missing>}``."""
    namespaces = message.metadata_context.filter_metadata
    if LB_METADATA_NAMESPACE not in namespaces:
        return {CONFORMANCE_SERVED_ENDPOINT: MISSING_LB_METADATA}
    fields = namespaces[LB_METADATA_NAMESPACE].fields
    value = fields.get(DESTINATION_ENDPOINT_SERVED)
    if value is None or value.WhichOneof("kind") != "string_value":
        return {CONFORMANCE_SERVED_ENDPOINT: MISSING_SERVED_METADATA}
    return {CONFORMANCE_SERVED_ENDPOINT: value.string_value}
