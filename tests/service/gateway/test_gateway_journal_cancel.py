"""CancelGenerate reaching a gateway replica that does not hold the call (decision 0019 addendum).

Two gateways over one journal: the call runs on replica a, CancelGenerate reaches replica b,
which marks the row cancel-requested; a's lease renewal reads the mark and stops its
provider call. The emulator's request log and aborted streams are the witness.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from test_gateway_journal import _drain, asked, keyed, open_gateways

from agentrt.v1 import gateway_service_pb2 as pb
from tests.emulators.providers import Reply


async def test_cancel_generate_on_another_replica_stops_the_holders_call(start_server, emu, tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    (a, b), channels = await open_gateways(start_server, emu, url, count=2, journal_lease_seconds=0.6)
    emu.script([Reply(text="y" * 2000, chunk_chars=2, event_delay=0.02), Reply(text="asked again")])
    request = keyed()
    call = a.StreamGenerate(pb.StreamGenerateRequest(request=request))
    async for item in call:
        if item.text_delta:
            break
    stopped = await b.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=request.idempotency_key))
    assert stopped.canceled  # marked for its holder, a
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(_drain(call), 10)  # a's caller is told, at a's next renewal
    assert err.value.code() == grpc.StatusCode.CANCELLED
    started = time.monotonic()
    while emu.aborted_streams == 0 and time.monotonic() - started < 10:
        await asyncio.sleep(0.02)
    assert emu.aborted_streams == 1  # the provider stream was closed
    again = await b.Generate(pb.GenerateRequest(request=request))  # nothing was journaled
    assert asked(emu) == 2 and not again.replayed and again.response.content[0].text.text == "asked again"
    done = await b.CancelGenerate(pb.CancelGenerateRequest(idempotency_key=request.idempotency_key))
    assert not done.canceled  # answered: nothing pending to cancel
    for ch in channels:
        await ch.close()
