"""What docs/serving.md says a client or a scraper reads is what the server sends: each value a
labelled counter of /metrics takes (`radixflow_requests_total{outcome}`: a new outcome, such as
`refused`, left out of the page is one a dashboard never plots), and each `code` an error body
carries (a client backs off on it, not on the message). test_docs.py checks the metric names;
these check the values beside them. Read from the source, so nothing but the metrics is imported."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from radixflow.server.errors import STATUS_CODES
from radixflow.server.metrics import ServerMetrics

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "docs" / "serving.md"
_SPAN = re.compile(r"`([^`]+)`")
# a label value as the page quotes it (`refused`); a one-letter span is a field (`n`), not one
_VALUE = re.compile(r"[a-z][a-z_]+")
_CODES_SAID = re.compile(r"A refusal carries a `code`(.*?)a 400 carries none", re.S)
_CODE_SAID = re.compile(r"`(\w+)` \((?:every )?(\d{3})\b")


def _labelled() -> dict[str, set[str]]:
    """Each labelled series of a fresh server (its values declared up front), as the docs name
    it (`radixflow_requests_total`), with the values of its label."""
    series = {}
    for family in ServerMetrics().registry.collect():
        values = {v for s in family.samples for k, v in s.labels.items() if k != "le"}
        if values:
            series[f"{family.name}_total" if family.type == "counter" else family.name] = values
    return series


def _row(text: str, name: str) -> str:
    """The metrics table's row of series ``name`` (`radixflow_requests_total{outcome}`)."""
    rows = [line for line in text.splitlines() if line.startswith(f"| `{name}{{")]
    assert len(rows) == 1, name
    return rows[0]


def _values_said(row: str) -> set[str]:
    """The label values a row quotes: its bare lowercase spans, the series' own name aside."""
    return {span for span in _SPAN.findall(row) if _VALUE.fullmatch(span)}


def test_the_serving_docs_give_the_values_of_every_labelled_counter_and_only_those():
    text = SERVING.read_text()
    series = _labelled()
    assert series["radixflow_requests_total"] >= {"finished", "refused"}
    said = {name: _values_said(_row(text, name)) for name in series}
    assert said == series


def test_a_label_value_the_row_leaves_out_is_caught():
    row = "| `radixflow_requests_total{outcome}` | counter | `finished`, `failed`, `aborted` (gone) |"
    assert _values_said(row) == {"finished", "failed", "aborted"}
    assert _values_said(row) != _labelled()["radixflow_requests_total"]


@functools.cache  # the package parsed once for both tests
def _codes_sent() -> frozenset[tuple[int, str]]:
    """(status, code) of every error body the server and the fleet send: the codes a status
    carries whoever refuses (`STATUS_CODES`), and each code an `ApiError` or `error_body` call
    in their source names for its literal status."""
    sent = set(STATUS_CODES.items())
    # an error body is made where HTTP is answered: the server's package and the fleet's
    paths = [p for package in ("server", "cluster") for p in (ROOT / "radixflow" / package).rglob("*.py")]
    for path in paths:
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call) or ast.unparse(call.func) not in ("ApiError", "error_body"):
                continue
            given = [*call.args[3:4], *(k.value for k in call.keywords if k.arg == "code")]
            status = call.args[0] if call.args else None
            for code in given:
                if isinstance(code, ast.Constant) and isinstance(status, ast.Constant):
                    sent.add((status.value, code.value))
    return frozenset(sent)


def _codes_said(text: str) -> set[tuple[int, str]]:
    found = _CODES_SAID.search(" ".join(text.split()))
    assert found, "serving.md's sentence naming the codes a refusal carries"
    return {(int(status), code) for code, status in _CODE_SAID.findall(found.group(1))}


def test_the_serving_docs_give_every_error_code_the_server_sends_and_only_those():
    sent = _codes_sent()
    assert {(404, "model_not_found"), (413, "request_too_large"), (503, "service_unavailable")} <= sent
    assert _codes_said(SERVING.read_text()) == sent


def test_a_code_the_sentence_leaves_out_or_gives_a_wrong_status_is_caught():
    text = (
        "A refusal carries a `code` a client can back off on: `queue_full` (429), "
        "`service_unavailable` (every 503: draining), `request_too_large` (400); a 400 carries none"
    )
    said = _codes_said(text)
    assert said == {(429, "queue_full"), (503, "service_unavailable"), (400, "request_too_large")}
    assert _codes_sent() - said == {(413, "request_too_large"), (404, "model_not_found")}
