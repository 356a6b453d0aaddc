"""Reading Kubernetes protobuf request bodies for the built-in kinds the fake API server serves.

``codec.decode`` turns a ``application/vnd.kubernetes.protobuf`` body into the JSON-shaped
object; ``wire`` is the generic protobuf wire format; ``messages`` is the notation of the
declarative message table, and the other modules are the table itself, one API group each.
"""

from epp_sim.apiserver.protobuf.codec import PROTOBUF, decode

__all__ = ["PROTOBUF", "decode"]
