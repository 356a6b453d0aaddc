"""Protobuf table: ``apiextensions.k8s.io/v1`` CustomResourceDefinition, its versions and JSON schemas.

``JSONSchemaProps`` names its fields as JSON Schema does (``$ref``, ``x-kubernetes-…``); the
``JSONSchemaPropsOr…`` unions are a schema, a bool or a list in JSON, and ``JSON`` is raw JSON.
"""

from __future__ import annotations

from typing import Any

from epp_sim.apiserver.protobuf.messages import Part

__all__ = ["PART"]


def _schema_or_array(fields: dict[str, Any]) -> Any:
    return fields.get("jSONSchemas", fields.get("schema"))


def _schema_or_bool(fields: dict[str, Any]) -> Any:
    return fields["schema"] if "schema" in fields else bool(fields.get("allows", False))


def _schema_or_strings(fields: dict[str, Any]) -> Any:
    return fields.get("property", fields.get("schema"))


PART = Part(
    messages={
        "CustomResourceDefinition": """metadata=1:ObjectMeta spec=2:CustomResourceDefinitionSpec
            status=3:CustomResourceDefinitionStatus""",
        "CustomResourceDefinitionSpec": """group=1? names=3:CustomResourceDefinitionNames scope=4?
            versions=7:[CustomResourceDefinitionVersion] conversion=9:CustomResourceConversion
            preserveUnknownFields=10:bool""",
        "CustomResourceDefinitionNames": """plural=1? singular=2 shortNames=3:[string] kind=4? listKind=5
            categories=6:[string]""",
        "CustomResourceDefinitionVersion": """name=1? served=2:bool? storage=3:bool? schema=4:CustomResourceValidation
            subresources=5:CustomResourceSubresources additionalPrinterColumns=6:[CustomResourceColumnDefinition]
            deprecated=7:bool deprecationWarning=8? selectableFields=9:[SelectableField]""",
        "CustomResourceValidation": "openAPIV3Schema=1:JSONSchemaProps",
        "CustomResourceSubresources": "status=1:CustomResourceSubresourceStatus scale=2:CustomResourceSubresourceScale",
        "CustomResourceSubresourceStatus": "",
        "CustomResourceSubresourceScale": "specReplicasPath=1? statusReplicasPath=2? labelSelectorPath=3?",
        "CustomResourceColumnDefinition": "name=1? type=2? format=3 description=4 priority=5:int jsonPath=6?",
        "SelectableField": "jsonPath=1?",
        "CustomResourceConversion": "strategy=1? webhook=2:WebhookConversion",
        "WebhookConversion": "clientConfig=2:WebhookClientConfig conversionReviewVersions=3:[string]",
        "WebhookClientConfig": "service=1:ServiceReference caBundle=2:bytes url=3?",
        "ServiceReference": "namespace=1? name=2? path=3? port=4:int?",
        "CustomResourceDefinitionStatus": """conditions=1:[CustomResourceDefinitionCondition]
            acceptedNames=2:CustomResourceDefinitionNames storedVersions=3:[string] observedGeneration=4:int""",
        "CustomResourceDefinitionCondition": """type=1? status=2? lastTransitionTime=3:Time reason=4 message=5
            observedGeneration=6:int""",
        "JSONSchemaProps": """id=1 $schema=2 $ref=3? description=4 type=5 format=6 title=7 default=8:JSON
            maximum=9:double? exclusiveMaximum=10:bool minimum=11:double? exclusiveMinimum=12:bool maxLength=13:int?
            minLength=14:int? pattern=15 maxItems=16:int? minItems=17:int? uniqueItems=18:bool multipleOf=19:double?
            enum=20:[JSON] maxProperties=21:int? minProperties=22:int? required=23:[string]
            items=24:JSONSchemaPropsOrArray allOf=25:[JSONSchemaProps] oneOf=26:[JSONSchemaProps]
            anyOf=27:[JSONSchemaProps] not=28:JSONSchemaProps properties=29:{JSONSchemaProps}
            additionalProperties=30:JSONSchemaPropsOrBool patternProperties=31:{JSONSchemaProps}
            dependencies=32:{JSONSchemaPropsOrStringArray} additionalItems=33:JSONSchemaPropsOrBool
            definitions=34:{JSONSchemaProps} externalDocs=35:ExternalDocumentation example=36:JSON nullable=37:bool
            x-kubernetes-preserve-unknown-fields=38:bool? x-kubernetes-embedded-resource=39:bool
            x-kubernetes-int-or-string=40:bool x-kubernetes-list-map-keys=41:[string] x-kubernetes-list-type=42?
            x-kubernetes-map-type=43? x-kubernetes-validations=44:[ValidationRule]""",
        "JSONSchemaPropsOrArray": "schema=1:JSONSchemaProps jSONSchemas=2:[JSONSchemaProps]",
        "JSONSchemaPropsOrBool": "allows=1:bool? schema=2:JSONSchemaProps",
        "JSONSchemaPropsOrStringArray": "schema=1:JSONSchemaProps property=2:[string]",
        "ExternalDocumentation": "description=1 url=2",
        "ValidationRule": "rule=1? message=2 messageExpression=3 reason=4? fieldPath=5 optionalOldSelf=6:bool?",
        "JSON": "raw=1:json",
    },
    forms={
        "JSONSchemaPropsOrArray": _schema_or_array,
        "JSONSchemaPropsOrBool": _schema_or_bool,
        "JSONSchemaPropsOrStringArray": _schema_or_strings,
        "JSON": lambda fields: fields.get("raw"),
    },
    kinds=(("apiextensions.k8s.io/v1", "CustomResourceDefinition"),),
)
