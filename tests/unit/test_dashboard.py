"""docs/grafana-dashboard.json and docs/prometheus-alerts.yml: each loads, has the fields its
format requires, and every query names only metrics (and labels, and label values) that a
real application's `GET /metrics` exports after the flows the panels show."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from authgate import create_app
from tests.helpers import (
    ANN,
    Backend,
    FakeClock,
    assert_error,
    login,
    make_config,
    refresh,
    register,
    running,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana-dashboard.json"
ALERTS = DOCS / "prometheus-alerts.yml"
#: PromQL's own words (functions, aggregations, operators, modifiers).
PROMQL = frozenset(
    [
        "sum",
        "rate",
        "increase",
        "irate",
        "histogram_quantile",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "or",
        "and",
        "unless",
        "avg",
        "max",
        "min",
        "count",
        "topk",
        "bottomk",
        "clamp_min",
        "abs",
        "bool",
        "offset",
    ]
)
#: Series Prometheus makes itself, not authgate's /metrics.
PROMETHEUS_OWN = frozenset({"up"})
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum")}


class Exported:
    """What one /metrics body declares: sample names, their labels, and the values seen."""

    def __init__(self, text: str, routes: set[str]) -> None:
        self.labels: dict[str, set[str]] = {}
        self.values: dict[str, set[str]] = {}
        self.routes = routes
        for family in text_string_to_metric_families(text):
            names = [family.name + s for s in _SUFFIXES.get(family.type, ("",))]
            for sample in family.samples:
                names.append(sample.name)
                for label, value in sample.labels.items():
                    self.values.setdefault(label, set()).add(value)
            keys = {k for s in family.samples for k in s.labels}
            for name in names:
                extra = {"le"} if name.endswith("_bucket") else set()
                self.labels.setdefault(name, set()).update(keys | extra)

    def check(self, expr: str) -> list[str]:
        """Everything wrong with one PromQL expression, as sentences."""
        wrong: list[str] = []
        used: set[str] = set()
        for name, matchers in _SELECTOR.findall(expr):
            if name in PROMETHEUS_OWN:
                used.add(name)
                continue
            if name not in self.labels:
                wrong.append(f"{name} is not exported")
                continue
            used.add(name)
            for label, _op, value in _MATCHER.findall(matchers):
                wrong += self._matcher(name, label, value)
        bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
        clauses = re.findall(r"\bby\s*\(([^)]*)\)", bare)
        for token in re.findall(
            r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.sub(r"\bby\s*\([^)]*\)", " ", bare)
        ):
            if token not in PROMQL and token not in PROMETHEUS_OWN:
                if token not in self.labels:
                    wrong.append(f"{token} is not exported")
                used.add(token)
        if any(self.labels.get(n) == set() for n in used):
            # A family with no sample yet (no second factor in these flows, no Redis): the
            # text format names it but not its labels, so its `by` labels go unchecked.
            clauses = []
        for clause in clauses:
            labels = {x.strip() for x in clause.split(",") if x.strip()}
            known = set().union(*(self.labels.get(n, set()) for n in used))
            wrong += [f"no metric of the expression has a label {x}" for x in labels - known]
        if not used:
            wrong.append("names no metric")
        return wrong

    def _matcher(self, name: str, label: str, value: str) -> list[str]:
        if label not in self.labels[name]:
            return [f"{name} has no label {label}"]
        if label == "status":
            return [] if re.fullmatch(r"[1-5]\d\d", value) else [f"status {value!r}"]
        if label == "route":
            return [] if value in self.routes else [f"no route {value!r}"]
        if value not in self.values.get(label, set()):
            return [f"{label}={value!r} never seen on /metrics"]
        return []


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """A real application on SQLite, after the flows the panels show; its /metrics."""

    async def flows() -> Exported:
        backend = Backend("sqlite", tmp_path_factory.mktemp("dashboard") / "data")
        app = create_app(make_config(backend), clock=FakeClock())
        async with running(app) as client:
            await register(client)
            first = await login(client)
            wrong = await client.post("/auth/login", json={"email": ANN, "password": "x" * 12})
            assert_error(wrong, 401)
            client.cookies.clear()
            second = (await refresh(client, first["refresh_token"])).json()
            await refresh(client, second["refresh_token"])
            assert_error(await refresh(client, first["refresh_token"]), 401)
            assert (await client.get("/readiness")).status_code == 200
            response = await client.get("/metrics")
            assert response.status_code == 200
        routes = set(app.openapi()["paths"])  # the route templates (FastAPI nests routers)
        return Exported(response.text, routes)

    return asyncio.run(flows())


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_the_dashboard_has_what_grafana_requires() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] >= 39
    assert dash["title"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dash["uid"])
    [variable] = dash["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    ids = [panel["id"] for panel in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["type"] in {"timeseries", "stat", "gauge", "table"}
        assert panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y"))
        assert grid["x"] + grid["w"] <= 24
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"]
            assert target["expr"]
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for wanted in ("logins by outcome", "refresh", "hash queue wait", "503", "p99"):
        assert wanted in titles


def test_every_dashboard_query_names_what_metrics_exports(exported: Exported) -> None:
    problems = {
        f"{panel['title']} / {target['refId']}": found
        for panel in _dashboard()["panels"]
        for target in panel["targets"]
        if (found := exported.check(target["expr"].replace("$__rate_interval", "5m")))
    }
    assert not problems


def test_the_alert_rules_are_well_formed_and_name_what_metrics_exports(
    exported: Exported,
) -> None:
    rules = _rules()
    assert {r["alert"] for r in rules} >= {
        "AuthgateRefreshReuseSpike",
        "AuthgateHashQueueSaturated",
        "AuthgateReadinessFailing",
    }
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        assert not exported.check(rule["expr"]), (rule["alert"], exported.check(rule["expr"]))


def test_the_check_itself_refuses_what_is_not_exported(exported: Exported) -> None:
    assert exported.check("rate(authgate_logins_total[5m])") == []
    assert exported.check("rate(authgate_login_total[5m])") == [
        "authgate_login_total is not exported"
    ]
    assert exported.check('authgate_logins_total{user="1"}') == [
        "authgate_logins_total has no label user"
    ]
    assert exported.check('authgate_refreshes_total{outcome="reused"}') == [
        "outcome='reused' never seen on /metrics"
    ]
    assert exported.check("sum by (email) (authgate_logins_total)") == [
        "no metric of the expression has a label email"
    ]
