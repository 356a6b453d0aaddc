"""A simulated vLLM model server: OpenAI API, vLLM ``/metrics``, and a performance model behind them.

Public surface: :class:`SimConfig` and :class:`Pins` (settings), :class:`ModelServer` and
:func:`model_servers` (start servers in-process), :class:`Engine` (the performance model, for
tests that drive it directly), and ``command.add_parser`` for ``epp sim model-server``.
"""

from .config import Pins, PinsError, SimConfig
from .engine import Engine, EngineStoppedError, GenerationRequest, InvalidRequestError, RequestHandle
from .fixture import ModelServer, model_servers

__all__ = [
    "Engine",
    "EngineStoppedError",
    "GenerationRequest",
    "InvalidRequestError",
    "ModelServer",
    "Pins",
    "PinsError",
    "RequestHandle",
    "SimConfig",
    "model_servers",
]
