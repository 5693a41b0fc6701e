"""The gateway's domain service: resolve, validate, limit, call, retry (seed 002 "LLM Integration").

One model call, in order:
1. resolve the provider and model (the request's, else the configured default);
   unknown provider -> INVALID_ARGUMENT/UNKNOWN_PROVIDER, known but not configured ->
   FAILED_PRECONDITION/PROVIDER_NOT_CONFIGURED, a model the local provider does not serve
   -> INVALID_ARGUMENT/INVALID_VALUE (`Provider.model_id`);
2. validate the request whole (validation.py): nothing is sent for a bad request;
3. reserve the input tokens with the limiter (waiting at most the request's
   max_queue_wait, default from config, and never past the caller's deadline): an exact
   count where it is cheap or configured, else an upper bound (limiter/count.py);
4. call the adapter, retrying retryable errors (retry.py) within the deadline;
5. settle the reservation with the reported input tokens, and tell the limiter whether
   the provider throttled the call (each 429, retried or not) or answered it.

Streams retry only until their first delta: once a delta has reached the caller, a
failure ends the stream with the error and no final response.

Steps 4 and 5 run inside one CLIENT span per call (`telemetry.provider_call_span`, "chat
<model>"): the response id, model and usage as attributes, each retry a `model_retry`
event on it (retry.log_retry), a failure its stable reason as `error.type`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import suppress

from agentrt.core.errors import MeshError, Reason, Status, invalid, precondition, quote
from agentrt.gateway.errors import GATEWAY_ORIGIN, ProviderError
from agentrt.gateway.limiter import LimiterKey, OverBudget, Reservation, TokenLimiter
from agentrt.gateway.limiter.count import input_token_bound
from agentrt.gateway.providers.provider import Call, Provider
from agentrt.gateway.retry import RetryContext, RetryPolicy, log_retry, next_delay, with_retries
from agentrt.gateway.validation import validate_request
from agentrt.mesh import telemetry
from agentrt.mesh.context import DEFAULT_TENANT
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

#: Every provider key this build knows, configured or not.
KNOWN_PROVIDERS = ("local", "openai", "openai-chat", "anthropic")

#: Providers whose CountTokens is exact: the local tokenizer (free, always used for
#: admission) and OpenAI Responses' input-token endpoint (a round trip: used when
#: AGENTRT_LIMITER_EXACT_COUNT is set, or when the upper bound exceeds the whole budget).
_EXACT_COUNTERS = ("local", "openai")
#: Provider refusals that consumed no input tokens (their reservation settles to 0).
_REFUSED = (
    Reason.RATE_LIMITED,
    Reason.INVALID_REQUEST,
    Reason.CONTEXT_OVERFLOW,
    Reason.PROVIDER_AUTHENTICATION,
)
#: Most of the caller's remaining time kept back from limiter admission, in seconds.
_DEADLINE_MARGIN_SECONDS = 0.25
#: Settles of abandoned calls still running (kept referenced until done).
_BACKGROUND: set[asyncio.Task[None]] = set()

log = logging.getLogger("agentrt.gateway")


def parse_model_ref(text: str) -> c.ModelRef:
    """Parse "provider:model" (or "provider") into a ModelRef."""
    provider, _, model = text.partition(":")
    return c.ModelRef(provider=provider.strip(), model=model.strip())


class ModelGateway:
    """Provider-neutral Generate / StreamGenerate / CountTokens / ListModels."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        limiter: TokenLimiter,
        *,
        default_model: c.ModelRef,
        retry_policy: RetryPolicy,
        request_timeout_seconds: float = 600.0,
        default_max_queue_wait_seconds: float = 30.0,
    ) -> None:
        """Create the gateway.

        Args:
            providers: the configured providers by key.
            limiter: the input-token limiter.
            default_model: used when a request names no provider.
            retry_policy: how retryable provider errors are retried.
            request_timeout_seconds: cap on one provider call, in seconds.
            default_max_queue_wait_seconds: limiter wait when a request sets none, in seconds.
        """
        self._providers = dict(providers)
        self._limiter = limiter
        self._default = default_model
        self._retry = retry_policy
        self._timeout = request_timeout_seconds
        self._queue_wait = default_max_queue_wait_seconds

    def provider(self, name: str) -> Provider | None:
        """Return the configured provider called name, or None."""
        return self._providers.get(name)

    def resolve(self, ref: c.ModelRef) -> tuple[Provider, str]:
        """Return (provider, model id) for a request's model.

        Raises:
            MeshError: INVALID_ARGUMENT/UNKNOWN_PROVIDER, FAILED_PRECONDITION/PROVIDER_NOT_CONFIGURED,
                INVALID_ARGUMENT/INVALID_VALUE (field `model.model`) for a model the provider
                does not serve (the local provider: decision 0047).
        """
        name = ref.provider or self._default.provider
        model = ref.model if ref.provider else (ref.model or self._default.model)
        if name not in KNOWN_PROVIDERS:
            raise invalid(
                Reason.UNKNOWN_PROVIDER,
                f"unknown provider {quote(name)}; known: {', '.join(KNOWN_PROVIDERS)}",
                field="model.provider",
            )
        provider = self._providers.get(name)
        if provider is None:
            raise precondition(
                Reason.PROVIDER_NOT_CONFIGURED,
                f"provider {quote(name)} is not configured on this gateway "
                "(no API key, base URL or model file)",
                provider=name,
            )
        return provider, provider.model_id(model)

    def check(self, request: g.ModelRequest) -> None:
        """Resolve and validate request as a call would, sending nothing (no I/O).

        Raises:
            MeshError: the errors of `resolve` and `validation.validate_request`.
        """
        self._prepare(request, None)

    def _prepare(
        self, request: g.ModelRequest, time_remaining: float | None, checked: bool = False
    ) -> tuple[Provider, Call, float | None]:
        provider, model = self.resolve(request.model)
        if not checked:
            validate_request(request)
        deadline = None if time_remaining is None else time.monotonic() + time_remaining
        timeout = self._timeout if time_remaining is None else max(0.001, min(self._timeout, time_remaining))
        return provider, Call(request, model, timeout), deadline

    def _max_wait(self, request: g.ModelRequest, deadline: float | None) -> float:
        wait = self._queue_wait
        if request.HasField("max_queue_wait"):
            wait = request.max_queue_wait.ToTimedelta().total_seconds()
        if deadline is not None:
            # Admission (store round trips included) ends a little before the caller's
            # deadline, so a refusal reaches it with its reason rather than DEADLINE_EXCEEDED.
            left = max(0.0, deadline - time.monotonic())
            wait = min(wait, left - min(_DEADLINE_MARGIN_SECONDS, left * 0.1))
        return wait

    async def _reserve(
        self, request: g.ModelRequest, provider: Provider, call: Call, deadline: float | None
    ) -> Reservation:
        # The servicer resolved the tenant (validation.resolve_tenant); "" from a direct
        # caller is the default tenant, as in the metrics' labels.
        key = LimiterKey(request.tenant or DEFAULT_TENANT, provider.name, call.model)
        exact = None
        if provider.name == "local" or (provider.name == "openai" and self._limiter.exact_count):
            exact = await self._exact_count(provider, call)
        tokens = exact if exact is not None else input_token_bound(request)
        try:
            return await self._limiter.reserve(key, tokens, self._max_wait(request, deadline))
        except OverBudget:
            # An upper bound over the whole budget may still fit once counted exactly.
            if exact is not None or provider.name not in _EXACT_COUNTERS:
                raise
            exact = await self._exact_count(provider, call)
            if exact is None or exact >= tokens:
                raise
            return await self._limiter.reserve(key, exact, self._max_wait(request, deadline))

    async def _exact_count(self, provider: Provider, call: Call) -> int | None:
        # None when the provider cannot count exactly right now: the caller reserves the bound.
        if not provider.counts_tokens:
            return None
        try:
            counted = await provider.count_tokens(call)
        except Exception as exc:  # noqa: BLE001 - counting is an optimization; the bound is safe
            log.warning(
                "%s could not count tokens for admission (%s); reserving an upper bound", provider.name, exc
            )
            return None
        return counted.input_tokens if counted.kind == g.TOKEN_COUNT_KIND_EXACT else None

    async def _on_retry(self, key: LimiterKey, err: ProviderError) -> None:
        # Only throttling is feedback: a retried 5xx is neither a success nor a rate limit.
        if err.reason == Reason.RATE_LIMITED:
            await self._limiter.record_outcome(key, rate_limited=True)

    async def generate(
        self,
        request: g.ModelRequest,
        time_remaining: float | None = None,
        *,
        checked: bool = False,
        answered: Callable[[], None] | None = None,
    ) -> g.GenerateResponse:
        """Make one model call and return the canonical response (004 §2.1).

        Args:
            request: the provider-neutral request.
            time_remaining: seconds until the caller's deadline; None for none.
            checked: the request already passed `check` unchanged (the model-call journal
                checks before it claims), so it is not validated again.
            answered: called once the provider has answered, before the limiter settles
                (the journal's flight: from then on the call is paid for; a cancel stops nothing).

        Raises:
            MeshError: from resolve and validation (see there); RESOURCE_EXHAUSTED/RATE_LIMITED
                (with retry_after_seconds) from the limiter or the provider; UNAVAILABLE/
                PROVIDER_UNAVAILABLE; INVALID_ARGUMENT/CONTEXT_OVERFLOW or INVALID_REQUEST;
                UNAUTHENTICATED/PROVIDER_AUTHENTICATION.
        """
        provider, call, deadline = self._prepare(request, time_remaining, checked)
        reservation = await self._reserve(request, provider, call, deadline)
        where = RetryContext(provider.name, call.model, request.run_id)
        with telemetry.provider_call_span(
            provider=provider.name, model=call.model, rpc="Generate", run_id=request.run_id
        ) as span:
            try:
                response, retries = await with_retries(
                    lambda: provider.generate(call),
                    self._retry,
                    deadline,
                    where,
                    on_retry=lambda err: self._on_retry(reservation.key, err),
                )
            except ProviderError as err:
                span.fail(str(err.reason).lower(), err.message)
                await self._settle_failed(reservation, err)
                raise
            except BaseException:
                _abandon(self._limiter, reservation)
                raise
            _record_response(span, response, retries)
        if answered is not None:
            answered()
        await self._settle(reservation, response)
        out = g.GenerateResponse(response=response, retries=retries)
        out.queue_wait.FromNanoseconds(int(reservation.waited_seconds * 1e9))
        return out

    async def stream(
        self,
        request: g.ModelRequest,
        time_remaining: float | None = None,
        *,
        checked: bool = False,
        answered: Callable[[], None] | None = None,
    ) -> AsyncIterator[g.StreamGenerateResponse]:
        """Stream deltas, then exactly one `final` (the accepted response), then end.

        Closing the iterator (the caller went away) closes the provider stream; closing it
        after the final changes nothing (the reservation is settled by then). `checked`,
        `answered` (called when the provider's final response arrived, before settling): as in
        `generate`.

        Raises:
            MeshError: as generate; a provider stream that ends without its terminal event
                raises UNAVAILABLE/PROVIDER_UNAVAILABLE and yields no final.
        """
        provider, call, deadline = self._prepare(request, time_remaining, checked)
        reservation = await self._reserve(request, provider, call, deadline)
        where = RetryContext(provider.name, call.model, request.run_id)
        retries = 0
        settled = False
        with telemetry.provider_call_span(
            provider=provider.name, model=call.model, rpc="StreamGenerate"
        ) as span:
            try:
                while True:
                    sent = False
                    items = provider.stream(call)
                    try:
                        async for item in items:
                            if isinstance(item, c.ModelResponse):
                                _record_response(span, item, retries)
                                if answered is not None:
                                    answered()
                                await self._settle(reservation, item)
                                settled = True
                                final = g.GenerateResponse(response=item, retries=retries)
                                final.queue_wait.FromNanoseconds(int(reservation.waited_seconds * 1e9))
                                yield g.StreamGenerateResponse(final=final)
                                return
                            sent = True
                            yield item
                        raise ProviderError(
                            Status.INTERNAL,
                            Reason.INTERNAL,
                            f"{provider.name} stream yielded no final response",
                        )
                    except ProviderError as err:
                        delay = None if sent else next_delay(err, retries, self._retry, deadline)
                        if delay is None:
                            span.fail(str(err.reason).lower(), err.message)
                            await self._settle_failed(reservation, err)
                            raise
                        retries += 1
                        log_retry(err, retries, delay, self._retry, where)
                        await self._on_retry(reservation.key, err)
                        await asyncio.sleep(delay)
                    finally:
                        with suppress(Exception):
                            await items.aclose()  # type: ignore[attr-defined]
            except ProviderError:
                raise  # settled by _settle_failed
            except BaseException:
                # Cancelled or closed early: the reservation stays counted (closed after the
                # final, there is nothing left to settle).
                if not settled:
                    _abandon(self._limiter, reservation)
                raise

    async def count_tokens(
        self, request: g.ModelRequest, time_remaining: float | None = None
    ) -> g.CountTokensResponse:
        """Count a request's input tokens where the provider can.

        Raises:
            MeshError: as generate; FAILED_PRECONDITION/TOKEN_COUNTING_UNSUPPORTED where it cannot.
        """
        provider, call, deadline = self._prepare(request, time_remaining)
        if not provider.counts_tokens:
            raise precondition(
                Reason.TOKEN_COUNTING_UNSUPPORTED,
                f"{provider.name} cannot count tokens",
                provider=provider.name,
            )
        counted, _ = await with_retries(
            lambda: provider.count_tokens(call),
            self._retry,
            deadline,
            RetryContext(provider.name, call.model),
        )
        return g.CountTokensResponse(input_tokens=counted.input_tokens, kind=counted.kind)  # type: ignore[arg-type]

    def list_models(self) -> g.ListModelsResponse:
        """Return the configured providers with their default models, in KNOWN_PROVIDERS order."""
        out = g.ListModelsResponse()
        for name in KNOWN_PROVIDERS:
            provider = self._providers.get(name)
            if provider is not None:
                out.models.add(
                    model=c.ModelRef(provider=name, model=provider.default_model),
                    counts_tokens=provider.counts_tokens,
                    streams=provider.streams,
                )
        return out

    async def _settle(self, reservation: Reservation, response: c.ModelResponse) -> None:
        used = response.usage.input_tokens if response.usage.input_tokens else None
        await self._limiter.settle(reservation, used)
        await self._limiter.record_outcome(reservation.key, rate_limited=False)

    async def _settle_failed(self, reservation: Reservation, err: MeshError) -> None:
        # A refused call consumed no input tokens, nor did one the gateway could not encode;
        # one that failed in flight (5xx, timeout, broken stream) may have, so it keeps its
        # reservation. A rate limit is feedback.
        unsent = err.reason in _REFUSED or err.metadata.get("origin") == GATEWAY_ORIGIN
        await self._limiter.settle(reservation, 0 if unsent else None)
        if err.reason == Reason.RATE_LIMITED:
            await self._limiter.record_outcome(reservation.key, rate_limited=True)

    async def close(self) -> None:
        """Close every provider."""
        for provider in self._providers.values():
            with suppress(Exception):
                await provider.close()


def _record_response(span: telemetry.GenerationSpan, response: c.ModelResponse, retries: int) -> None:
    """Put a provider's answer on its CLIENT span: ids and usage, never content."""
    usage = response.usage
    span.set_response(
        response_id=response.response_id,
        model=response.model.model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        finish_reasons=[c.StopReason.Name(response.stop_reason)],
    )
    span.set("agentrt.gateway.retries", retries)


def _abandon(limiter: TokenLimiter, reservation: Reservation) -> None:
    """Settle an abandoned call's reservation at its reserved size, in the background.

    The caller went away (cancellation) or the call broke: the provider may have read the
    input, so the tokens stay counted; the settle runs as a task of its own because the
    cancelled one cannot await it.
    """
    try:
        task = asyncio.get_running_loop().create_task(limiter.settle(reservation, None))
    except RuntimeError:  # no running loop (a generator finalized at shutdown)
        return
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
