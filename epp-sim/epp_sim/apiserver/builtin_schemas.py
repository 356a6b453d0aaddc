"""openAPIV3Schemas of the built-in kinds the fake API server serves.

Written by hand, covering the fields manifests and controllers use; rarely used subtrees are
``any_object()`` (kept, not described). Schemas carry ``default`` (the server's defaulting),
``required`` (422 Invalid) and strategic-merge keys (``x-kubernetes-patch-merge-key``) that the
patch code and the OpenAPI documents read.
"""

from __future__ import annotations

from typing import Any

from epp_sim.apiserver.schema import (
    any_object,
    arr,
    boolean,
    int_or_string,
    integer,
    obj,
    string,
    string_map,
)

__all__ = ["RBAC_GROUP", "SCHEMAS", "object_meta", "wrap"]

Schema = dict[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"


def object_meta() -> Schema:
    owner = obj(
        {
            "apiVersion": string(),
            "kind": string(),
            "name": string(),
            "uid": string(),
            "controller": boolean(),
            "blockOwnerDeletion": boolean(),
        },
        required=("apiVersion", "kind", "name", "uid"),
    )
    return obj(
        {
            "name": string(),
            "generateName": string(),
            "namespace": string(),
            "uid": string(),
            "resourceVersion": string(),
            "generation": integer(format="int64"),
            "creationTimestamp": string(format="date-time"),
            "deletionTimestamp": string(format="date-time"),
            "deletionGracePeriodSeconds": integer(format="int64"),
            "labels": string_map(),
            "annotations": string_map(),
            "ownerReferences": arr(owner, merge_key="uid"),
            "finalizers": arr(string(), list_type="set", **{"x-kubernetes-patch-strategy": "merge"}),
            "managedFields": arr(any_object(), list_type="atomic"),
            "selfLink": string(),
        }
    )


def wrap(spec: Schema | None, status: Schema | None, *, spec_needed: bool = False, **extra_props: Schema) -> Schema:
    """A whole object: apiVersion, kind, metadata, then spec/status (when given) and extras.

    ``spec_needed``: an absent spec defaults to ``{}`` so its required fields are reported by name.
    """
    props: dict[str, Schema] = {"apiVersion": string(), "kind": string(), "metadata": object_meta()}
    if spec is not None:
        props["spec"] = {**spec, "default": {}} if spec_needed else spec
    if status is not None:
        props["status"] = status
    props.update(extra_props)
    return obj(props)


def _conditions() -> Schema:
    cond = obj(
        {
            "type": string(),
            "status": string(),
            "reason": string(),
            "message": string(),
            "lastTransitionTime": string(format="date-time"),
            "lastUpdateTime": string(format="date-time"),
            "lastProbeTime": string(format="date-time"),
            "observedGeneration": integer(format="int64"),
        },
        required=("type", "status"),
    )
    return arr(cond, merge_key="type")


def _container() -> Schema:
    env = obj({"name": string(), "value": string(), "valueFrom": any_object()}, required=("name",))
    port = obj(
        {
            "containerPort": integer(),
            "name": string(),
            "protocol": string(default="TCP"),
            "hostPort": integer(),
            "hostIP": string(),
        },
        required=("containerPort",),
    )
    resources = obj(
        {
            "limits": {"type": "object", "additionalProperties": int_or_string()},
            "requests": {"type": "object", "additionalProperties": int_or_string()},
            "claims": arr(any_object()),
        }
    )
    loose = [
        "readinessProbe",
        "livenessProbe",
        "startupProbe",
        "lifecycle",
        "securityContext",
        "resizePolicy",
        "restartPolicy",
    ]
    props: dict[str, Schema] = {
        "name": string(),
        "image": string(),
        "command": arr(string(), list_type="atomic"),
        "args": arr(string(), list_type="atomic"),
        "workingDir": string(),
        "env": arr(env, merge_key="name"),
        "envFrom": arr(any_object(), list_type="atomic"),
        "ports": arr(port, merge_key="containerPort"),
        "resources": resources,
        "volumeMounts": arr(any_object(), merge_key="mountPath"),
        "volumeDevices": arr(any_object(), merge_key="devicePath"),
        "imagePullPolicy": string(),
        "terminationMessagePath": string(default="/dev/termination-log"),
        "terminationMessagePolicy": string(default="File"),
        "stdin": boolean(),
        "stdinOnce": boolean(),
        "tty": boolean(),
    }
    props.update({name: any_object() for name in loose})
    props["restartPolicy"] = string()
    return obj(props, required=("name",))


def pod_spec() -> Schema:
    loose = [
        "affinity",
        "securityContext",
        "dnsConfig",
        "readinessGates",
        "hostAliases",
        "topologySpreadConstraints",
        "os",
        "overhead",
        "schedulingGates",
        "resourceClaims",
        "resources",
    ]
    props: dict[str, Schema] = {
        "containers": arr(_container(), merge_key="name", minItems=1),
        "initContainers": arr(_container(), merge_key="name"),
        "ephemeralContainers": arr(any_object(), merge_key="name"),
        "volumes": arr(
            obj({"name": string()}, required=("name",), preserve=True),
            merge_key="name",
        ),
        "restartPolicy": string(default="Always", enum=["Always", "OnFailure", "Never"]),
        "terminationGracePeriodSeconds": integer(format="int64", default=30),
        "activeDeadlineSeconds": integer(format="int64"),
        "dnsPolicy": string(default="ClusterFirst"),
        "nodeSelector": string_map(),
        "serviceAccountName": string(),
        "serviceAccount": string(),
        "automountServiceAccountToken": boolean(),
        "nodeName": string(),
        "hostNetwork": boolean(),
        "hostPID": boolean(),
        "hostIPC": boolean(),
        "shareProcessNamespace": boolean(),
        "hostname": string(),
        "subdomain": string(),
        "imagePullSecrets": arr(obj({"name": string()}), merge_key="name"),
        "schedulerName": string(default="default-scheduler"),
        "tolerations": arr(any_object(), list_type="atomic"),
        "priorityClassName": string(),
        "priority": integer(),
        "runtimeClassName": string(),
        "enableServiceLinks": boolean(),
        "preemptionPolicy": string(),
        "setHostnameAsFQDN": boolean(),
        "hostUsers": boolean(),
    }
    props.update({name: any_object() for name in loose})
    return obj(props, required=("containers",))


def _pod_status() -> Schema:
    container_status = obj(
        {
            "name": string(),
            "ready": boolean(),
            "started": boolean(),
            "restartCount": integer(),
            "image": string(),
            "imageID": string(),
            "containerID": string(),
            "state": any_object(),
            "lastState": any_object(),
        },
        preserve=True,
    )
    return obj(
        {
            "phase": string(),
            "conditions": _conditions(),
            "message": string(),
            "reason": string(),
            "hostIP": string(),
            "hostIPs": arr(obj({"ip": string()}), merge_key="ip"),
            "podIP": string(),
            "podIPs": arr(obj({"ip": string()}), merge_key="ip"),
            "startTime": string(format="date-time"),
            "containerStatuses": arr(container_status, list_type="atomic"),
            "initContainerStatuses": arr(container_status, list_type="atomic"),
            "qosClass": string(),
            "nominatedNodeName": string(),
            "observedGeneration": integer(format="int64"),
        },
        preserve=True,
    )


def label_selector() -> Schema:
    expr = obj(
        {"key": string(), "operator": string(), "values": arr(string(), list_type="atomic")},
        required=("key", "operator"),
    )
    return obj(
        {"matchLabels": string_map(), "matchExpressions": arr(expr, list_type="atomic")},
    )


def pod_template() -> Schema:
    return obj({"metadata": object_meta(), "spec": pod_spec()})


def _workload_status() -> Schema:
    return obj(
        {
            "observedGeneration": integer(format="int64"),
            "replicas": integer(),
            "updatedReplicas": integer(),
            "readyReplicas": integer(),
            "availableReplicas": integer(),
            "unavailableReplicas": integer(),
            "fullyLabeledReplicas": integer(),
            "terminatingReplicas": integer(),
            "collisionCount": integer(),
            "conditions": _conditions(),
        }
    )


def _deployment_spec() -> Schema:
    rolling = obj({"maxUnavailable": int_or_string(default="25%"), "maxSurge": int_or_string(default="25%")})
    strategy = obj(
        {"type": string(enum=["Recreate", "RollingUpdate"]), "rollingUpdate": rolling},
        default={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
    )
    return obj(
        {
            "replicas": integer(default=1, minimum=0),
            "selector": label_selector(),
            "template": pod_template(),
            "strategy": strategy,
            "minReadySeconds": integer(),
            "revisionHistoryLimit": integer(default=10),
            "paused": boolean(),
            "progressDeadlineSeconds": integer(default=600),
        },
        required=("selector", "template"),
    )


def _replicaset_spec() -> Schema:
    return obj(
        {
            "replicas": integer(default=1, minimum=0),
            "selector": label_selector(),
            "template": pod_template(),
            "minReadySeconds": integer(),
        },
        required=("selector",),
    )


def _service_spec() -> Schema:
    port = obj(
        {
            "name": string(),
            "protocol": string(default="TCP"),
            "appProtocol": string(),
            "port": integer(minimum=1, maximum=65535),
            "targetPort": int_or_string(),
            "nodePort": integer(),
        },
        required=("port",),
    )
    return obj(
        {
            "type": string(default="ClusterIP", enum=["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
            "selector": string_map(),
            "ports": arr(port, merge_key="port"),
            "clusterIP": string(),
            "clusterIPs": arr(string(), list_type="atomic"),
            "externalIPs": arr(string(), list_type="atomic"),
            "externalName": string(),
            "sessionAffinity": string(default="None"),
            "sessionAffinityConfig": any_object(),
            "ipFamilies": arr(string(), list_type="atomic"),
            "ipFamilyPolicy": string(),
            "externalTrafficPolicy": string(),
            "internalTrafficPolicy": string(),
            "loadBalancerIP": string(),
            "loadBalancerClass": string(),
            "loadBalancerSourceRanges": arr(string(), list_type="atomic"),
            "allocateLoadBalancerNodePorts": boolean(),
            "healthCheckNodePort": integer(),
            "publishNotReadyAddresses": boolean(),
            "trafficDistribution": string(),
        }
    )


def _crd_spec() -> Schema:
    names = obj(
        {
            "plural": string(),
            "singular": string(),
            "kind": string(),
            "listKind": string(),
            "shortNames": arr(string(), list_type="atomic"),
            "categories": arr(string(), list_type="atomic"),
        },
        required=("plural", "kind"),
    )
    version = obj(
        {
            "name": string(),
            "served": boolean(),
            "storage": boolean(),
            "deprecated": boolean(),
            "deprecationWarning": string(),
            "schema": obj({"openAPIV3Schema": any_object()}),
            "subresources": any_object(),
            "additionalPrinterColumns": arr(any_object(), list_type="atomic"),
            "selectableFields": arr(any_object(), list_type="atomic"),
        },
        required=("name", "served", "storage"),
    )
    return obj(
        {
            "group": string(),
            "names": names,
            "scope": string(enum=["Namespaced", "Cluster"]),
            "versions": arr(version, merge_key="name", minItems=1),
            "conversion": any_object(),
            "preserveUnknownFields": boolean(),
        },
        required=("group", "names", "scope", "versions"),
    )


def _lease_spec() -> Schema:
    return obj(
        {
            "holderIdentity": string(),
            "leaseDurationSeconds": integer(),
            "acquireTime": string(format="date-time"),
            "renewTime": string(format="date-time"),
            "leaseTransitions": integer(),
            "strategy": string(),
            "preferredHolder": string(),
        }
    )


def _atomic(schema: Schema) -> Schema:
    """A struct replaced as a whole by merges and applies (``x-kubernetes-map-type: atomic``)."""
    return {**schema, "x-kubernetes-map-type": "atomic"}


def _service_account() -> Schema:
    object_ref = obj(
        {
            "apiVersion": string(),
            "kind": string(),
            "name": string(),
            "namespace": string(),
            "uid": string(),
            "resourceVersion": string(),
            "fieldPath": string(),
        }
    )
    return wrap(
        None,
        None,
        automountServiceAccountToken=boolean(),
        imagePullSecrets=arr(_atomic(obj({"name": string()})), list_type="atomic"),
        secrets=arr(_atomic(object_ref), merge_key="name"),
    )


def _rules() -> Schema:
    strings = arr(string(), list_type="atomic")
    rule = obj(
        {
            "verbs": strings,
            "apiGroups": strings,
            "resources": strings,
            "resourceNames": strings,
            "nonResourceURLs": strings,
        },
        required=("verbs",),
    )
    return arr(rule, list_type="atomic")


def _role(*, cluster: bool) -> Schema:
    if not cluster:
        return wrap(None, None, rules=_rules())
    aggregation = obj({"clusterRoleSelectors": arr(label_selector(), list_type="atomic")})
    return wrap(None, None, rules=_rules(), aggregationRule=aggregation)


def _binding() -> Schema:
    """RoleBinding and ClusterRoleBinding; ``roleRef.apiGroup`` defaults to the RBAC group, as on the real server."""
    role_ref = obj(
        {"apiGroup": string(default=RBAC_GROUP), "kind": string(), "name": string()},
        required=("apiGroup", "kind", "name"),
    )
    subject = obj(
        {"apiGroup": string(), "kind": string(), "name": string(), "namespace": string()},
        required=("kind", "name"),
    )
    binding = wrap(None, None, roleRef=_atomic(role_ref), subjects=arr(_atomic(subject), list_type="atomic"))
    return {**binding, "required": ["roleRef"]}


SCHEMAS: dict[str, Schema] = {
    "Namespace": wrap(
        obj({"finalizers": arr(string(), list_type="atomic")}), obj({"phase": string(), "conditions": _conditions()})
    ),
    "Pod": wrap(pod_spec(), _pod_status(), spec_needed=True),
    "ConfigMap": wrap(None, None, data=string_map(), binaryData=string_map(), immutable=boolean()),
    "Secret": wrap(None, None, data=string_map(), stringData=string_map(), type=string(), immutable=boolean()),
    "Service": wrap(_service_spec(), obj({"loadBalancer": any_object(), "conditions": _conditions()})),
    "Deployment": wrap(_deployment_spec(), _workload_status(), spec_needed=True),
    "ReplicaSet": wrap(_replicaset_spec(), _workload_status(), spec_needed=True),
    "Lease": wrap(_lease_spec(), None),
    "ServiceAccount": _service_account(),
    "Role": _role(cluster=False),
    "ClusterRole": _role(cluster=True),
    "RoleBinding": _binding(),
    "ClusterRoleBinding": _binding(),
    "CustomResourceDefinition": wrap(_crd_spec(), any_object(), spec_needed=True),
}
"""Whole-object schemas by kind (fresh dicts at import: plain data, nothing started)."""
