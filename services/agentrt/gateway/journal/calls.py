"""The model-call journal: a keyed model call reaches the provider once (decision 0019).

A Generate or StreamGenerate whose request carries an `idempotency_key` goes through
`CallJournal`; one without a key goes straight to `ModelGateway` as before. For a keyed
call, per (tenant, key):

1. The request is checked as a call would check it (nothing is recorded for a bad one)
   and fingerprinted (SHA-256 of its deterministic bytes without the key, the tenant and
   max_queue_wait).
2. In this process, calls of one key share one *flight*: a task, detached from every
   caller, that owns the key's work. A caller joins the flight and follows it; a caller
   that goes away (cancel, deadline, its runs replica killed) leaves the flight running.
3. The flight claims the key in the store. Claimed: it asks the provider, renewing its
   lease every third of the lease while the call runs (a timer; a task only when one is
   due), records the answer (DONE) and only then hands it to its callers, so a caller
   that saw an answer can always have it replayed. A provider error releases the claim
   (nothing was answered; the next call asks again) and reaches every caller of the flight.
4. Not claimed: the key's row says DONE (the answer is replayed: for a stream, deltas
   synthesized from the recorded response, then the final) or PENDING on a live holder
   (another replica, or an earlier process): the flight polls the row (50 ms doubling to
   1 s) until it is DONE, or until the holder's lease has ended, when exactly one waiter
   takes the call over (compare-and-set on the dead holder) and asks again, once per
   dead holder.
5. A key whose fingerprint differs is INVALID_ARGUMENT/IDEMPOTENCY_KEY_REUSED. A store
   that fails at the claim (after quick retries of a transient failure) fails the call
   UNAVAILABLE/DEPENDENCY_UNAVAILABLE (nothing was asked). The record is retried through
   transient failures (`RECORD_POLICY`); a store still failing then gets the answer to its
   callers unrecorded, and the process keeps it and records it in the background, holding
   the row's lease meanwhile (journal/late.py): a repeat of the key here is answered from the
   kept copy, one on another replica waits for the record.
6. Rows older than the retention (`ttl_s`) are swept at most once a minute.

Only the first caller of a flight that asked the provider gets `replayed=False`. `cancel`
(CancelGenerate) stops a flight of this process on purpose: a run that cancels its own call
(CancelRun, a guardrail's tripwire) does not want it to outlive it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import suppress

from sqlalchemy.exc import SQLAlchemyError

from agentrt.core.errors import MeshError, Reason, Status
from agentrt.gateway.gateway import ModelGateway
from agentrt.gateway.journal.flight import Flight, Renewal, fingerprint, reused
from agentrt.gateway.journal.late import LateRecords
from agentrt.gateway.journal.store import JournalStore, State
from agentrt.mesh.storage.transient import RetryPolicy, retry_transient
from agentrt.v1 import gateway_service_pb2 as g

log = logging.getLogger("agentrt.gateway.journal")

#: The holder's lease on a key while its provider call runs, seconds.
DEFAULT_LEASE_SECONDS = 10.0
#: How long a finished call's answer is kept for a repeat, seconds.
DEFAULT_TTL_SECONDS = 3600.0
POLL_MIN_SECONDS = 0.05
POLL_MAX_SECONDS = 1.0
SWEEP_INTERVAL_SECONDS = 60.0
#: Quick retries of a claim through a transient store failure (a dropped connection).
STORE_POLICY = RetryPolicy(attempts=3, first_delay_s=0.05, max_delay_s=0.5)
#: Retries of a record through a transient store failure, before the answer is handed over
#: unrecorded (and recorded later: journal/late.py).
RECORD_POLICY = RetryPolicy(attempts=5, first_delay_s=0.05, max_delay_s=0.5)

Key = tuple[str, str]


class CallJournal:
    """Generate / StreamGenerate through the model-call journal (see the module docstring)."""

    def __init__(
        self,
        gateway: ModelGateway,
        store: JournalStore,
        *,
        lease_s: float = DEFAULT_LEASE_SECONDS,
        ttl_s: float = DEFAULT_TTL_SECONDS,
        holder: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Journal gateway's keyed calls in store.

        Args:
            gateway: asks the providers.
            store: the journal rows (memory, or SQL shared by every replica).
            lease_s: a holder's lease on a key while it asks, seconds (renewed every third).
            ttl_s: retention of a row after its first claim, seconds.
            holder: this process's holder id ("" = host:pid:random, unique per process).
            clock: epoch seconds (the store compares leases across replicas).
        """
        self._gateway = gateway
        self._store = store
        self._lease = lease_s
        self._ttl = ttl_s
        self._clock = clock
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._flights: dict[Key, Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._late = LateRecords(store, self.holder, lease_s, clock, self._tasks)
        self._last_sweep = 0.0

    async def prepare(self) -> None:
        """Prepare the store (migrations); see JournalStore.prepare."""
        await self._store.prepare()

    async def close(self, grace: float = 0.0) -> None:
        """Let the flights still running finish for up to `grace` seconds, stop the rest, close the store.

        A flight that outlived its caller (a runs replica gone mid-call) and ends within the
        grace has its answer recorded, so the caller's repeat after a restart is replayed
        rather than asked of the provider again (decision 0019: a keyed call reaches the
        provider once). One still running after it is cancelled: its claim is released and a
        repeat asks again.

        Args:
            grace: seconds, the gateway's drain left when its close hook runs (0: stop now).
        """
        if self._tasks and grace > 0:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._store.close()

    async def generate(
        self, request: g.ModelRequest, time_remaining: float | None = None
    ) -> g.GenerateResponse:
        """ModelGateway.generate, journaled when the request has an idempotency key.

        Raises:
            MeshError: ModelGateway.generate's errors; INVALID_ARGUMENT/INVALID_VALUE (a bad
                key), INVALID_ARGUMENT/IDEMPOTENCY_KEY_REUSED, UNAVAILABLE/DEPENDENCY_UNAVAILABLE
                (the journal's store failed before anything was asked).
        """
        if not request.idempotency_key:
            return await self._gateway.generate(request, time_remaining)
        key, flight, origin = self._join(request, time_remaining, streamed=False)
        try:
            await flight.wait()
            return flight.answer(origin)
        finally:
            self._leave(key, flight)

    def stream(
        self, request: g.ModelRequest, time_remaining: float | None = None
    ) -> AsyncIterator[g.StreamGenerateResponse]:
        """ModelGateway.stream, journaled when the request has an idempotency key.

        A journaled stream carries the flight's deltas (live, or synthesized from the
        recorded answer), then exactly one final. Raises as `generate`.
        """
        if not request.idempotency_key:
            return self._gateway.stream(request, time_remaining)
        return self._stream(request, time_remaining)

    async def _stream(
        self, request: g.ModelRequest, time_remaining: float | None
    ) -> AsyncIterator[g.StreamGenerateResponse]:
        key, flight, origin = self._join(request, time_remaining, streamed=True)
        try:
            async for item in flight.follow(origin):
                yield item
        finally:
            self._leave(key, flight)

    async def cancel(self, tenant: str, key: str) -> bool:
        """Stop key's call; return True when it was stopped here or marked for its holder.

        When it runs in this process: its provider call is cancelled and its claim released
        (a repeat asks again); its callers fail CANCELLED. When another replica holds it:
        the row is marked cancel-requested and the holder stops it at its next lease
        renewal (within a third of the lease), unless it has already answered there. False:
        no call of the key is pending, or its provider already answered here and only its
        record is left (being written, or kept and written later: late.py): nothing is left
        to stop, the answer is recorded and handed over, and the store is not asked.

        Raises:
            sqlalchemy.exc.SQLAlchemyError, OSError: the store failed to mark the row.
        """
        if (tenant, key) in self._late:
            return False
        flight = self._flights.get((tenant, key))
        if flight is not None and not flight.done and flight.task is not None:
            if flight.answered:  # paid for: its answer is recorded and handed over, not dropped
                return False
            flight.task.cancel()
            if flight.asking:
                return True
        return await self._store.request_cancel(tenant, key)  # held elsewhere: its holder stops it

    def _join(
        self, request: g.ModelRequest, time_remaining: float | None, streamed: bool
    ) -> tuple[Key, Flight, bool]:
        self._gateway.check(request)
        # The flight's own copy (it outlives the caller), hashed in place (no second copy).
        copy = g.ModelRequest()
        copy.CopyFrom(request)
        fp = fingerprint(copy)
        key = (request.tenant, request.idempotency_key)
        flight = self._flights.get(key)
        if flight is not None:
            if flight.fingerprint != fp:
                raise reused(request.idempotency_key)
            flight.subscribers += 1
            return key, flight, False
        flight = Flight(fp, streamed)
        flight.subscribers = 1
        self._flights[key] = flight
        deadline = None if time_remaining is None else time.monotonic() + time_remaining
        flight.task = asyncio.create_task(self._run(key, flight, copy, deadline))
        self._tasks.add(flight.task)
        flight.task.add_done_callback(self._tasks.discard)
        return key, flight, True

    def _leave(self, key: Key, flight: Flight) -> None:
        flight.subscribers -= 1
        if flight.subscribers == 0 and not flight.asking and not flight.done and flight.task is not None:
            flight.task.cancel()  # only waiting for another holder: nobody to wait for
            if self._flights.get(key) is flight:
                del self._flights[key]

    async def _run(self, key: Key, flight: Flight, request: g.ModelRequest, deadline: float | None) -> None:
        tenant, name = key
        try:
            self._maybe_sweep()
            poll = POLL_MIN_SECONDS
            while True:
                now = self._clock()
                try:
                    row, claimed = await retry_transient(
                        functools.partial(
                            self._store.claim,
                            tenant,
                            name,
                            flight.fingerprint,
                            self.holder,
                            now,
                            now + self._lease,
                        ),
                        what=f"journal claim of {name!r}",
                        policy=STORE_POLICY,
                    )
                except Exception as exc:  # noqa: BLE001 - any store failure is the same answer
                    log.warning("model-call journal unavailable at claim of %r: %s", name, exc)
                    flight.fail(
                        MeshError(
                            Status.UNAVAILABLE,
                            Reason.DEPENDENCY_UNAVAILABLE,
                            "the gateway's model-call journal is unavailable; nothing was asked",
                        )
                    )
                    return
                if not claimed and row.fingerprint != flight.fingerprint:
                    flight.fail(reused(name))
                    return
                # A PENDING row of this process's holder is this flight's own claim: an earlier
                # try committed and its answer was lost (flights are one per key and process),
                # or an earlier flight's answer is still to be recorded (late.py).
                if claimed or (row.state == State.PENDING and row.holder == self.holder):
                    kept = self._late.held(key, flight.fingerprint)
                    if kept is not None:  # answered here, its record still pending (late.py)
                        if claimed:  # the row was gone: record the kept answer under the new one
                            self._late.keep(key, flight.fingerprint, kept)
                        flight.finish(g.GenerateResponse.FromString(kept), replayed=True)
                        return
                    await self._ask(key, flight, request, deadline)
                    return
                if row.state == State.DONE:
                    flight.finish(g.GenerateResponse.FromString(row.response), replayed=True)
                    return
                if row.lease_until_s < now:
                    if await self._store.take_over(
                        tenant, name, row.holder, self.holder, now, now + self._lease
                    ):
                        log.warning(
                            "model call %r: its holder %s stopped renewing; asking again (takeover %d)",
                            name,
                            row.holder,
                            row.takeovers + 1,
                        )
                        await self._ask(key, flight, request, deadline)
                        return
                    continue
                await asyncio.sleep(poll)
                poll = min(poll * 2, POLL_MAX_SECONDS)
        except asyncio.CancelledError:
            flight.fail(MeshError(Status.CANCELLED, Reason.INTERNAL, "the gateway stopped the call"))
            raise
        except (SQLAlchemyError, OSError) as exc:
            log.warning("model-call journal failed while waiting on %r: %s", name, exc)
            flight.fail(
                MeshError(
                    Status.UNAVAILABLE,
                    Reason.DEPENDENCY_UNAVAILABLE,
                    "the gateway's model-call journal is unavailable; try again",
                )
            )
        except Exception as exc:  # noqa: BLE001 - a bug: reaches the callers, who answer INTERNAL
            log.exception("model call %r failed in the journal", name)
            flight.fail(exc)
        finally:
            if self._flights.get(key) is flight:
                del self._flights[key]

    async def _ask(self, key: Key, flight: Flight, request: g.ModelRequest, deadline: float | None) -> None:
        """Ask the provider as the key's holder; record the answer, then hand it over."""
        tenant, name = key
        flight.asking = True
        renewer = Renewal(self._lease / 3, functools.partial(self._renew, key))
        left = None if deadline is None else max(0.001, deadline - time.monotonic())
        final: g.GenerateResponse | None = None
        try:
            # _join checked this request (a copy of it): it is not validated again.
            if flight.streamed:
                # Read to its end (the final is last): a stream left open at its final would
                # be closed later by the event loop's finalizer, for nothing.
                async for item in self._gateway.stream(request, left, checked=True, answered=flight.paid):
                    if item.WhichOneof("event") == "final":
                        final = item.final
                    else:
                        flight.push(item)
            else:
                final = await self._gateway.generate(request, left, checked=True, answered=flight.paid)
        except BaseException as exc:
            renewer.stop()
            # Nothing answered: the next call with the key asks again (now, not after the lease).
            with suppress(Exception):
                await asyncio.shield(self._store.release(tenant, name, self.holder))
            if not isinstance(exc, Exception):
                flight.fail(MeshError(Status.CANCELLED, Reason.INTERNAL, "the model call was stopped"))
                raise  # cancelled: CancelGenerate, or the gateway is closing
            flight.fail(exc)
            return
        renewer.stop()
        if final is None:
            flight.fail(
                MeshError(
                    Status.UNAVAILABLE,
                    Reason.PROVIDER_UNAVAILABLE,
                    "the model stream ended without a response",
                )
            )
            with suppress(Exception):
                await self._store.release(tenant, name, self.holder)
            return
        replayed = False
        answer = final.SerializeToString()
        try:
            # Within a third of the lease, which no one renews meanwhile: past it the answer is
            # kept and its lease renewed while the record is tried again (late.py).
            async with asyncio.timeout(self._lease / 3):
                stored = await retry_transient(
                    functools.partial(self._store.finish, tenant, name, answer, self._clock()),
                    what=f"journal record of {name!r}",
                    policy=RECORD_POLICY,
                )
            if stored != answer:
                final, replayed = g.GenerateResponse.FromString(stored), True  # a takeover answered first
        except Exception as exc:  # noqa: BLE001 - the answer still reaches its callers
            log.warning("model call %r answered but not journaled yet (recorded later): %s", name, exc)
            self._late.keep(key, flight.fingerprint, answer)
        flight.finish(final, replayed=replayed)

    async def _renew(self, key: Key) -> bool:
        """Renew key's lease once; return whether to renew again (False: taken over or cancelled)."""
        tenant, name = key
        try:
            if not await self._store.renew(tenant, name, self.holder, self._clock() + self._lease):
                log.warning("model call %r: this gateway's lease was taken over; answering anyway", name)
                return False
            if await self._store.cancel_requested(tenant, name, self.holder):
                flight = self._flights.get(key)
                # Not once its provider answered (a stream read on past its final): paid for.
                if flight is not None and flight.task is not None and not flight.answered:
                    log.info("model call %r: cancelled through another gateway replica", name)
                    flight.task.cancel()
                return False
        except Exception as exc:  # noqa: BLE001 - the next renewal tries again
            log.warning("model call %r: lease renewal failed: %s", name, exc)
        return True

    def _maybe_sweep(self) -> None:
        now = self._clock()
        if now - self._last_sweep < SWEEP_INTERVAL_SECONDS:
            return
        self._last_sweep = now

        async def sweep() -> None:
            try:
                gone = await self._store.sweep(now, self._ttl)
                if gone:
                    log.info("model-call journal: %d row(s) past retention removed", gone)
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again
                log.warning("model-call journal sweep failed: %s", exc)

        task = asyncio.create_task(sweep())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
