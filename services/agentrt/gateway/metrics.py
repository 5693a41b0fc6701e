"""Token usage and failures of the gateway, as Prometheus metrics (issue 4; seed 002 "Usage").

Owns one `CollectorRegistry` per gateway (never prometheus_client's global one), so two
gateways in one process, as in the tests, keep separate counts. The servicer records:

- `agentrt_gateway_requests_total` {tenant, provider, model, rpc, outcome}: Generate and
  StreamGenerate calls, outcome `ok`, `error`, `canceled` or `replayed` (answered from the
  model-call journal: no provider call, so no usage);
- `agentrt_gateway_input_tokens_total` {tenant, provider, model}: reported input tokens,
  cached included; `..._output_tokens_total` (reasoning included),
  `..._cached_input_tokens_total`, `..._reasoning_tokens_total` likewise;
- `agentrt_gateway_errors_total` {tenant, provider, model, reason, origin}: failures and
  refused or window-stopped answers (below);
- `agentrt_gateway_retries_total` {tenant, provider, model, reason}: provider errors retried;
- `agentrt_gateway_limiter_queue_wait_seconds` {provider, model}: histogram of the limiter
  admission wait of answered calls, in seconds.

Token counters are separate metrics rather than one metric with a `type` label because
they overlap (input includes cached, output includes reasoning): summing over a label
would count tokens twice. Only answered calls report usage; a failed or canceled call
adds nothing to the token counters.

`errors_total.reason` is `rate_limited`, `unavailable`, `context_overflow`,
`invalid_request`, `authentication` for classified provider failures, `refusal` and
`context_overflow` for the stop reasons REFUSAL and CONTEXT_WINDOW_EXCEEDED of answered
calls (they are failures of the turn, not of the call), and the lower-cased ErrorInfo
reason for anything else (e.g. `request_too_large`, `unsupported_capability`). `origin`
is `provider` when the provider said so, `gateway` when the gateway refused on its own
(validation, limiter admission, configuration).

The limiter's gauges (`limiter_gauges`): `agentrt_gateway_limiter_{budget,used,pending}_tokens`
and `agentrt_gateway_limiter_state_age_seconds` {provider, family, tenant}; tenant is "*"
for a budget shared by all tenants.

Gauges owned by other parts (the limiter's budget state) are read at scrape time from
readers registered with `add_gauge_reader`: a reader is a cheap synchronous function
returning `Gauge` samples, called on the scrape thread (not the event loop), so it must
only read state already in memory (e.g. the replica's last-known budget).

The registry is handed to the gateway's MeshServer (server.py), which adds the RPC series
and serves `/metrics` on `server.metrics_port` when AGENTRT_GATEWAY_METRICS_PORT is set, as
for every service (mesh/telemetry/metrics.py; 0 = no endpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentrt.core.errors import MeshError, Reason
from agentrt.gateway.errors import GATEWAY_ORIGIN, ProviderError
from agentrt.gateway.limiter.rules import BucketState
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

PREFIX = "agentrt_gateway_"

#: Classified provider failures -> the `reason` label of errors_total.
ERROR_REASONS: Mapping[str, str] = {
    Reason.RATE_LIMITED: "rate_limited",
    Reason.PROVIDER_UNAVAILABLE: "unavailable",
    Reason.CONTEXT_OVERFLOW: "context_overflow",
    Reason.INVALID_REQUEST: "invalid_request",
    Reason.PROVIDER_AUTHENTICATION: "authentication",
}
#: Stop reasons of answered calls that count as errors of the turn.
STOP_ERRORS: Mapping[int, str] = {
    c.STOP_REASON_REFUSAL: "refusal",
    c.STOP_REASON_CONTEXT_WINDOW_EXCEEDED: "context_overflow",
}
#: Label sets whose answered-call series are kept at hand (beyond it, looked up per call).
_ANSWER_SERIES_ENTRIES = 4096
#: Queue-wait buckets, in seconds: from "not queued" to the default 30 s admission wait.
QUEUE_WAIT_BUCKETS = (0.0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_CALL = ("tenant", "provider", "model")


@dataclass(frozen=True)
class CallLabels:
    """Who a call is counted for.

    Attributes:
        tenant: the tenant charged (validation.resolve_tenant: the caller's header, or
            the request's tenant when no header was sent; never a rejected value).
        provider: provider key ("unknown" for a provider this build does not know).
        model: the resolved model id ("" when it could not be resolved).
    """

    tenant: str
    provider: str
    model: str

    def values(self) -> tuple[str, str, str]:
        """Return the label values in `_CALL` order."""
        return self.tenant, self.provider, self.model


@dataclass(frozen=True)
class Gauge:
    """One gauge sample read at scrape time.

    Attributes:
        name: metric name without the `agentrt_gateway_` prefix, e.g.
            "limiter_budget_tokens_per_minute"; every sample of one name must use the same
            label names.
        documentation: the metric's help text.
        value: the sample's value.
        labels: label name -> value, e.g. {"provider": "openai", "model": "gpt-4.1"}.
    """

    name: str
    documentation: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


#: What `add_gauge_reader` takes: a synchronous, cheap function (see the module docstring).
GaugeReader = Callable[[], Iterable[Gauge]]


#: The `tenant` label of a limiter bucket shared by every tenant (AGENTRT_LIMITER_PER_TENANT
#: off). No tenant can be called that: tenants start with a letter or digit.
ALL_TENANTS = "*"


def limiter_gauges(states: Iterable[BucketState]) -> list[Gauge]:
    """Return the limiter's bucket states as gauges (budget, used and pending input tokens).

    Labels: provider, family, tenant: the bucket's tenant with per-tenant budgets (named
    as in the other metrics, "default" for callers that sent none), else ALL_TENANTS ("*").
    Values are this replica's view (limiter.snapshot): tokens per window, and
    `limiter_state_age_seconds`, how long ago used and pending were read from the store.
    """
    out: list[Gauge] = []
    for st in states:
        labels = {"provider": st.provider, "family": st.family, "tenant": st.tenant or ALL_TENANTS}
        out.append(
            Gauge("limiter_budget_tokens", "Current input-token budget per window.", st.budget_tokens, labels)
        )
        out.append(
            Gauge(
                "limiter_used_tokens", "Input tokens reserved in the current window.", st.used_tokens, labels
            )
        )
        out.append(
            Gauge(
                "limiter_pending_tokens", "Reserved input tokens not yet settled.", st.pending_tokens, labels
            )
        )
        out.append(
            Gauge(
                "limiter_state_age_seconds",
                "Seconds since used and pending tokens were read from the limiter's store.",
                st.age_seconds,
                labels,
            )
        )
    return out


class _GaugeCollector(Collector):
    """Turns the registered readers' samples into gauge families at each scrape."""

    def __init__(self) -> None:
        self.readers: list[GaugeReader] = []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for reader in list(self.readers):
            for sample in reader():
                family = families.get(sample.name)
                if family is None:
                    family = GaugeMetricFamily(
                        PREFIX + sample.name, sample.documentation, labels=sorted(sample.labels)
                    )
                    families[sample.name] = family
                family.add_metric([sample.labels[k] for k in sorted(sample.labels)], sample.value)
        yield from families.values()

    def describe(self) -> Iterator[Metric]:
        # Readers are dynamic: describing would call them at registration time.
        return iter(())


class GatewayMetrics:
    """The gateway's metrics (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the metrics in registry (a new CollectorRegistry when None)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "Generate and StreamGenerate calls, by outcome (ok, error, canceled, replayed).",
            [*_CALL, "rpc", "outcome"],
            registry=r,
        )
        self.input_tokens = Counter(
            PREFIX + "input_tokens", "Input tokens reported by providers, cached included.", _CALL, registry=r
        )
        self.output_tokens = Counter(
            PREFIX + "output_tokens",
            "Output tokens reported by providers, reasoning included.",
            _CALL,
            registry=r,
        )
        self.cached_input_tokens = Counter(
            PREFIX + "cached_input_tokens",
            "Input tokens served from the provider's cache.",
            _CALL,
            registry=r,
        )
        self.reasoning_tokens = Counter(
            PREFIX + "reasoning_tokens", "Output tokens the model spent reasoning.", _CALL, registry=r
        )
        self.errors = Counter(
            PREFIX + "errors",
            "Failed calls and refused or window-stopped answers, by reason and origin.",
            [*_CALL, "reason", "origin"],
            registry=r,
        )
        self.retries = Counter(
            PREFIX + "retries",
            "Provider errors the gateway retried, by reason.",
            [*_CALL, "reason"],
            registry=r,
        )
        self.queue_wait = Histogram(
            PREFIX + "limiter_queue_wait_seconds",
            "Time answered calls waited for limiter admission, in seconds.",
            ["provider", "model"],
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self._gauges = _GaugeCollector()
        r.register(self._gauges)
        #: (labels, rpc) -> the series an answered call adds to (record_answer).
        self._answer_series: dict[tuple[CallLabels, str], tuple[Any, ...]] = {}

    def _answered(self, labels: CallLabels, rpc: str) -> tuple[Any, ...]:
        """The series of an answered call of labels and rpc, looked up once per label set."""
        series = self._answer_series.get((labels, rpc))
        if series is None:
            values = labels.values()
            series = (
                self.requests.labels(*values, rpc, "ok"),
                self.input_tokens.labels(*values),
                self.output_tokens.labels(*values),
                self.cached_input_tokens.labels(*values),
                self.reasoning_tokens.labels(*values),
                self.queue_wait.labels(labels.provider, labels.model),
            )
            if len(self._answer_series) < _ANSWER_SERIES_ENTRIES:
                self._answer_series[(labels, rpc)] = series
        return series

    # ---------------------------------------------------------------- recording

    def record_answer(self, labels: CallLabels, rpc: str, answer: g.GenerateResponse) -> None:
        """Count an answered call: its request, usage, queue wait, and a refusal or window stop.

        Args:
            labels: tenant, provider, model of the call.
            rpc: "Generate" or "StreamGenerate".
            answer: the final response (usage in tokens, queue_wait as a Duration).
        """
        values = labels.values()
        if answer.replayed:  # the journal's answer: its provider call was counted when made
            self.requests.labels(*values, rpc, "replayed").inc()
            return
        requests, input_tokens, output_tokens, cached, reasoning, queue_wait = self._answered(labels, rpc)
        requests.inc()
        usage = answer.response.usage
        input_tokens.inc(usage.input_tokens)
        output_tokens.inc(usage.output_tokens)
        cached.inc(usage.cached_input_tokens)
        reasoning.inc(usage.reasoning_tokens)
        wait = answer.queue_wait
        queue_wait.observe(wait.seconds + wait.nanos / 1e9)
        stop = STOP_ERRORS.get(answer.response.stop_reason)
        if stop is not None:
            self.errors.labels(*values, stop, "provider").inc()

    def record_failure(self, labels: CallLabels, rpc: str, err: MeshError) -> None:
        """Count a failed call by its reason (see the module docstring for the label values)."""
        values = labels.values()
        self.requests.labels(*values, rpc, "error").inc()
        self.errors.labels(*values, error_reason(err), error_origin(err)).inc()

    def record_canceled(self, labels: CallLabels, rpc: str) -> None:
        """Count a call the client canceled (or whose deadline passed) before it ended."""
        self.requests.labels(*labels.values(), rpc, "canceled").inc()

    def record_retry(self, labels: CallLabels, err: ProviderError) -> None:
        """Count one retry of a provider error."""
        self.retries.labels(*labels.values(), error_reason(err)).inc()

    def add_gauge_reader(self, reader: GaugeReader) -> None:
        """Register a gauge reader, called at every scrape (the limiter's budget state hook)."""
        self._gauges.readers.append(reader)

    def exposition(self) -> bytes:
        """Return the registry in the Prometheus text format."""
        return generate_latest(self.registry)


def error_reason(err: MeshError) -> str:
    """Return the `reason` label of a failure."""
    reason = str(err.reason)
    return ERROR_REASONS.get(reason, reason.lower())


def error_origin(err: MeshError) -> str:
    """Return "provider" for a provider's failure, "gateway" for the gateway's own refusal.

    An adapter's capability refusal is a ProviderError (see capabilities.unsupported) but
    never reached the provider: it is the gateway's; so is a request the gateway could not
    encode (errors.encoding_failure, metadata origin "gateway").
    """
    if (
        isinstance(err, ProviderError)
        and err.reason != Reason.UNSUPPORTED_CAPABILITY
        and err.metadata.get("origin") != GATEWAY_ORIGIN
    ):
        return "provider"
    return "gateway"
