"""The sending side of one ext_proc stream: its answers, and how the last one ends the RPC.

A stream's RPC is ended by the picker as soon as the exchange is complete, not left for the
gateway: Envoy resets an ext_proc stream as soon as it has the last answer, and a final status
that grpc.aio then fails to send on the reset call leaks its batch (grpc issue #43360, unfixed
in 1.85.3), about 100 bytes per request behind a stock Envoy. :meth:`Replies.send_last` closes
that race. ``await write(answer)`` returns only once gRPC reports the message sent, often after
Envoy has the answer and has reset the stream; starting the send and returning at once queues
the status right behind the message in gRPC core (one operation of each kind may be pending,
and the transport sends the messages before the status), so both leave together. Initial
metadata goes first on its own when nothing was sent yet, since gRPC refuses two pending
initial-metadata operations. That last send runs as a task of the server's :class:`~epp.tasks.TaskSet`,
held until it ends (a failure there only means the stream was already gone).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from epp.extproc import pb
from epp.tasks import TaskSet

__all__ = ["Replies", "ReplyChannel"]


class ReplyChannel(Protocol):
    """What a gRPC servicer context offers for sending (``grpc.aio.ServicerContext``)."""

    async def write(self, message: pb.ProcessingResponse) -> None: ...

    async def send_initial_metadata(self, initial_metadata: tuple[tuple[str, str], ...]) -> None: ...


class Replies:
    """Answers of one stream, in order; :meth:`send_last` for the one after which the RPC ends."""

    __slots__ = ("_channel", "_sends", "_started")

    def __init__(self, channel: ReplyChannel, sends: TaskSet) -> None:
        self._channel = channel
        self._sends = sends
        self._started = False

    async def send(self, answer: pb.ProcessingResponse) -> None:
        await self._channel.write(answer)
        self._started = True

    async def send_last(self, answer: pb.ProcessingResponse) -> None:
        """Start sending ``answer`` and return without waiting; the caller then ends the RPC."""
        if not self._started:
            await self._channel.send_initial_metadata(())
            self._started = True
        self._sends.start(self._channel.write(answer), "ext_proc-last-answer", quiet=True)
        await asyncio.sleep(0)  # the write task runs its first step, which starts the send
