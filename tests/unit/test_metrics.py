"""metrics.py on its own: the request tally hands the families exactly what `observe` and
`inc` would have, bucket boundaries included."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from authgate.metrics import Metrics
from tests.helpers import metric, parse_metrics

#: Below, on and above bucket bounds (a bound is inclusive: `le`).
DURATIONS = [0.0, 0.0005, 0.001, 0.0010001, 0.05, 0.25, 2.5, 10.0, 10.5, 99.0]


async def test_the_tally_equals_observing_each_request() -> None:
    metrics = Metrics()
    registry = CollectorRegistry()
    reference = Histogram(
        "reference",
        "the same durations, observed one by one",
        buckets=[
            float(b)
            for b in (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
        ],
        registry=registry,
    )
    for seconds in DURATIONS:
        metrics.record_request("/auth/me", "GET", 200, seconds)
        reference.observe(seconds)
    metrics.record_request("/auth/login", "POST", 401, 0.2)
    metrics.flush()
    metrics.flush()  # a second flush adds nothing
    ours = parse_metrics(generate_latest(metrics.registry).decode())
    theirs = parse_metrics(generate_latest(registry).decode())
    for (name, pairs), value in theirs.items():
        if name.endswith(("_bucket", "_count", "_sum")):
            suffix = name.removeprefix("reference")
            ours_value = metric(
                ours,
                "authgate_http_request_duration_seconds" + suffix,
                route="/auth/me",
                **dict(pairs),
            )
            assert ours_value == value, (suffix, pairs)
    requests = "authgate_http_requests_total"
    assert metric(ours, requests, route="/auth/me", method="GET", status="200") == len(DURATIONS)
    assert metric(ours, requests, route="/auth/login", status="401") == 1
